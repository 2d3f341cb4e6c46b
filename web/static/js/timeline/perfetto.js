// "Open in Perfetto UI": open ui.perfetto.dev in a new tab and hand it the exported window with
// Perfetto's documented PING / PONG postMessage protocol (docs/visualization/deep-linking-to-perfetto-ui.md).
// Needs no CSP change: nothing is fetched from Perfetto by this page, the trace goes by postMessage.

export const PERFETTO_ORIGIN = "https://ui.perfetto.dev";
const PING_MS = 100;
const GIVE_UP_MS = 20_000;

/** Resolves with a sentence for the user: what happened. */
export async function openInPerfetto(exportUrl, title, fileName) {
  const target = window.open(`${PERFETTO_ORIGIN}/#!/`, "_blank");
  if (!target) return "The browser blocked the new tab: allow pop-ups, or use Download window.";
  let buffer;
  try {
    const response = await fetch(exportUrl);
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    buffer = await response.arrayBuffer();
  } catch (error) {
    target.close();
    return `The window could not be exported: ${error.message}`;
  }
  return new Promise((resolve) => {
    const finish = (message) => {
      clearInterval(pinger);
      clearTimeout(timeout);
      window.removeEventListener("message", onMessage);
      resolve(message);
    };
    const onMessage = (event) => {
      if (event.origin !== PERFETTO_ORIGIN || event.source !== target || event.data !== "PONG") return;
      target.postMessage({ perfetto: { buffer, title, fileName } }, PERFETTO_ORIGIN);
      finish("Sent to ui.perfetto.dev.");
    };
    const ping = () => {
      try {
        target.postMessage("PING", PERFETTO_ORIGIN);
      } catch {
        // the tab is still on about:blank or was closed: ask again
      }
    };
    window.addEventListener("message", onMessage);
    const pinger = setInterval(ping, PING_MS);
    const timeout = setTimeout(
      () => finish("ui.perfetto.dev did not answer (is it reachable from this browser?): use Download window instead."),
      GIVE_UP_MS,
    );
  });
}
