"use strict";  // the first line of the page's one script: strict for page.js too
// The page's building blocks, ahead of page.js in the same script: elements made
// only through textContent, and one time zone for every time shown (the browser's),
// with the same moment in UTC in each one's title.
const pageFormat = (function () {

  // Build elements only through textContent: nothing from the queue is ever parsed as HTML.
  function el(tag, props, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "text") node.textContent = value == null ? "" : String(value);
      else if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  const pad = (n, width) => String(n).padStart(width || 2, "0");

  // Seconds since the epoch, on this browser's wall clock: "2026-11-30 14:03:22".
  function localTime(t) {
    const d = new Date(Math.floor(t) * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + clockTime(t);
  }

  // The time of day alone, on this browser's wall clock: "14:03:22".
  function clockTime(t) {
    const d = new Date(Math.floor(t) * 1000);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  // The same moment in UTC, for titles: "2026-11-30 08:33:22 UTC".
  function utcTime(t) {
    return new Date(Math.floor(t) * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  // The zone every time on the page is in, as of ``t``: "Asia/Kolkata (UTC+05:30)".
  function zoneLabel(t) {
    const minutes = -new Date(Math.floor(t) * 1000).getTimezoneOffset();
    const sign = minutes < 0 ? "-" : "+";
    const offset = "UTC" + sign + pad(Math.floor(Math.abs(minutes) / 60)) + ":" + pad(Math.abs(minutes) % 60);
    let name = "";
    try { name = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { name = ""; }
    return name && name !== "UTC" ? name + " (" + offset + ")" : offset;
  }

  function duration(seconds) {
    const abs = Math.abs(seconds);
    if (abs < 120) return Math.round(abs) + " s";
    if (abs < 7200) return Math.round(abs / 60) + " min";
    if (abs < 172800) return Math.round(abs / 3600) + " h";
    return Math.round(abs / 86400) + " d";
  }

  // ``t`` against ``now``: "now", "in 5 min", "3 h ago".
  function relTime(t, now) {
    const delta = t - now;
    if (Math.abs(delta) < 1) return "now";
    return delta > 0 ? "in " + duration(delta) : duration(delta) + " ago";
  }

  // A time for a field: local with how long from now, and UTC as its title.
  function stamp(t, now) {
    if (t == null) return { text: "–", title: "" };
    return { text: localTime(t) + " (" + relTime(t, now) + ")", title: utcTime(t) };
  }

  // The title of something that shows a time only as "in 5 min": the moment itself, local then UTC.
  function moment(t) {
    return localTime(t) + " · " + utcTime(t);
  }

  return { el, localTime, clockTime, utcTime, zoneLabel, duration, relTime, stamp, moment };
})();
