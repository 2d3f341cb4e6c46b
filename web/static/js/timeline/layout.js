// Which rows the timeline shows, top to bottom, and how tall each is: one section per rank (when
// several are shown), its track groups (collapsible), their tracks (a lane per nesting depth).

export const RULER_PX = 26;
export const SECTION_PX = 26;
export const GROUP_PX = 22;
export const LANE_PX = 18;
export const COUNTER_PX = 38;
export const TRACK_PAD_PX = 2;

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
  return groups.filter((g) => g.tracks.length);
}

function trackHeight(track) {
  if (track.kind === "counter") return COUNTER_PX;
  return Math.max(track.max_depth + 1, 1) * LANE_PX + 2 * TRACK_PAD_PX;
}

/**
 * rows: [{type: "section"|"group"|"track", section, y, h, key, label, collapsed?, group?, track?}]
 * with y measured from the top of the rows area (below the ruler); also a map "section/track id" -> row.
 */
export function layoutRows(sections, { collapsed, hidden }) {
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
      const shown = group.tracks.filter((t) => !hidden.has(trackKey(section.index, t.id)));
      if (!shown.length) continue;
      const key = groupKey(section.index, group.id);
      const groupFolded = collapsed.has(key);
      push({ type: "group", section, h: GROUP_PX, key, collapsed: groupFolded, label: group.name, group });
      if (groupFolded) continue;
      for (const track of shown) {
        const row = push({ type: "track", section, h: trackHeight(track), key: trackKey(section.index, track.id), label: track.name, track });
        trackRows.set(`${section.index}/${track.id}`, row);
      }
    }
  }
  return { rows, trackRows, height: y };
}

/** Track ids of a section that are drawn (not hidden, not in a collapsed group or rank). */
export function visibleTrackIds(section, { collapsed, hidden }) {
  if (!section.info || collapsed.has(sectionKey(section.index))) return [];
  const ids = [];
  for (const group of groupedTracks(section.info)) {
    if (collapsed.has(groupKey(section.index, group.id))) continue;
    for (const track of group.tracks) if (!hidden.has(trackKey(section.index, track.id))) ids.push(track.id);
  }
  return ids;
}

/** The y (rows area) of the middle of lane `depth` of a track row. */
export function laneMiddle(row, depth) {
  return row.y + TRACK_PAD_PX + depth * LANE_PX + LANE_PX / 2;
}
