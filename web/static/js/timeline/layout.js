// Which rows the timeline shows, top to bottom, and how tall each is: one section per rank (when
// several are shown), its track groups (collapsible), their tracks (a lane per nesting depth).
//
// So that the GPU is in sight when the page opens (issue 20): GPU groups come right after the
// steps, deep CPU / Python stacks are folded to a few lanes (the last lane shows the innermost
// slice under each instant; click the track's label to unfold it), and with several ranks only the
// GPU streams and steps are shown, without group rows (a rank without GPU streams keeps its
// deepest CPU thread) until the user asks for every track ("compact" off).

export const RULER_PX = 26;
export const SECTION_PX = 26;
export const GROUP_PX = 22;
export const LANE_PX = 18;
export const COUNTER_PX = 38;
export const TRACK_PAD_PX = 2;
/** Lanes of a folded CPU stack: one rank alone, and each rank when several are shown. */
export const FOLDED_LANES = 5;
export const FOLDED_LANES_SEVERAL = 2;

const GROUP_ORDER = { steps: 0, gpu: 1 }; // then every other group, in the server's order

/** Keys in the `collapsed` / `hidden` sets (and the URL): "0" a rank, "0.g2" a group, "0.t5" a track. */
export const sectionKey = (sectionIndex) => String(sectionIndex);
export const groupKey = (sectionIndex, groupId) => `${sectionIndex}.${groupId}`;
export const trackKey = (sectionIndex, trackId) => `${sectionIndex}.${trackId}`;

/** The groups of a trace in display order, each with its tracks; tracks of an unlisted group go last. */
export function groupedTracks(info) {
  const groups = info.groups.map((g) => ({ ...g, tracks: [] }));
  const byId = new Map(groups.map((g) => [g.id, g]));
  for (const track of info.tracks) {
    let group = byId.get(track.group);
    if (!group) {
      group = { id: track.group || "other", name: "Other", kind: "other", tracks: [] };
      byId.set(group.id, group);
      groups.push(group);
    }
    group.tracks.push(track);
  }
  const order = (g) => GROUP_ORDER[g.kind] ?? 2;
  return groups.filter((g) => g.tracks.length).sort((a, b) => order(a) - order(b));
}

/** The tracks compact mode keeps of a rank: GPU streams and steps, else its deepest CPU thread. */
function compactKeeps(info) {
  const groups = groupedTracks(info);
  const slices = (g) => g.tracks.filter((t) => t.kind === "slices");
  const kept = groups.filter((g) => g.kind === "gpu" || g.kind === "steps").flatMap(slices);
  if (groups.some((g) => g.kind === "gpu" && slices(g).length)) return new Set(kept.map((t) => t.id));
  const cpu = groups.filter((g) => g.kind === "cpu").flatMap(slices);
  const deepest = cpu.reduce((best, t) => (best && best.max_depth >= t.max_depth ? best : t), null);
  return new Set([...kept, deepest].filter(Boolean).map((t) => t.id));
}

/** A track's name without its numbers: the same thread of every rank (thread ids differ per rank). */
export const trackKind = (track) => track.name.replace(/\d+/g, "#");

/**
 * Is this track drawn: not unticked by the user, and kept by compact mode when that is on (compact
 * also keeps, in every rank, the tracks like the one of a slice the page revealed: `keepLike`).
 */
export function trackShown(section, track, { hidden, compact, keepLike }) {
  if (hidden.has(trackKey(section.index, track.id))) return false;
  if (!compact) return true;
  section.compactKeeps ??= compactKeeps(section.info);
  return section.compactKeeps.has(track.id) || Boolean(keepLike?.has(trackKind(track)));
}

/** How many lanes a track gets, and whether its stack is folded (CPU tracks deeper than the fold). */
function trackLanes(section, group, track, { unfolded, stacks }, several) {
  const depth = Math.max((track.max_depth ?? 0) + 1, 1);
  const limit = several ? FOLDED_LANES_SEVERAL : FOLDED_LANES;
  const foldable = group.kind !== "gpu" && depth > limit;
  const flipped = unfolded.has(trackKey(section.index, track.id));
  const folded = foldable && (stacks === "full" ? flipped : !flipped);
  return { lanes: folded ? limit : depth, stackDepth: depth, foldable, folded };
}

function trackHeight(track, lanes) {
  if (track.kind === "counter") return COUNTER_PX;
  return lanes * LANE_PX + 2 * TRACK_PAD_PX;
}

/**
 * rows: [{type: "section"|"group"|"track", section, y, h, key, label, collapsed?, group?, track?}]
 * with y measured from the top of the rows area (below the ruler); also a map "section/track id" -> row.
 */
export function layoutRows(sections, state) {
  const { collapsed } = state;
  const rows = [];
  const trackRows = new Map();
  let y = 0;
  const push = (row) => {
    rows.push({ ...row, y });
    y += row.h;
    return rows[rows.length - 1];
  };
  const several = sections.length > 1;
  for (const section of sections) {
    if (!section.info) continue;
    const folded = collapsed.has(sectionKey(section.index));
    if (several) {
      push({ type: "section", section, h: SECTION_PX, key: sectionKey(section.index), collapsed: folded, label: section.label });
      if (folded) continue;
    }
    for (const group of groupedTracks(section.info)) {
      const shown = group.tracks.filter((t) => trackShown(section, t, state));
      if (!shown.length) continue;
      const key = groupKey(section.index, group.id);
      if (!state.compact) {  // compact ranks: a rank's few tracks right under its header, no group rows
        const groupFolded = collapsed.has(key);
        push({ type: "group", section, h: GROUP_PX, key, collapsed: groupFolded, label: group.name, group });
        if (groupFolded) continue;
      }
      for (const track of shown) {
        const lanes = trackLanes(section, group, track, state, several);
        const key = trackKey(section.index, track.id);
        const row = push({ type: "track", section, h: trackHeight(track, lanes.lanes), key, label: track.name, track, group, ...lanes });
        trackRows.set(`${section.index}/${track.id}`, row);
      }
    }
  }
  return { rows, trackRows, height: y };
}

/** Track ids of a section that are drawn (not hidden, not in a collapsed group or rank). */
export function visibleTrackIds(section, state) {
  const { collapsed } = state;
  if (!section.info || collapsed.has(sectionKey(section.index))) return [];
  const ids = [];
  for (const group of groupedTracks(section.info)) {
    if (!state.compact && collapsed.has(groupKey(section.index, group.id))) continue;
    for (const track of group.tracks) if (trackShown(section, track, state)) ids.push(track.id);
  }
  return ids;
}

/** The lane a slice of this depth is drawn in: its own, or a folded stack's last lane. */
export function laneOf(row, depth) {
  return row.lanes ? Math.min(depth, row.lanes - 1) : depth;
}

/** The y (rows area) of the middle of the lane a slice of depth `depth` is drawn in. */
export function laneMiddle(row, depth) {
  return row.y + TRACK_PAD_PX + laneOf(row, depth) * LANE_PX + LANE_PX / 2;
}
