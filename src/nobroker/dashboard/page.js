// The page's behaviour: the live counts, the chart and the workers, the lists, a job in full, the actions.
// page-format.js and page-panels.js come first.
(function () {
  "use strict";
  const { el, clockTime, utcTime, zoneLabel } = pageFormat;
  const CSRF = document.querySelector('meta[name="csrf-token"]').content;
  const REFRESH_MS = 1000;
  const DETAIL_EVERY = 3;  // rounds between reloads of an unchanged job's detail
  const QUEUES_EVERY = 3;  // rounds between reads of every queue's counts (and of queues added meanwhile)
  const HEAVY_EVERY = 5;  // rounds between rereads of a costly list: a search, or newest first with a kind
  const CHART_EVERY = 5;  // rounds between redraws of the chart (the server samples every 10 s)
  const WORKERS_EVERY = 3;  // rounds between reads of the workers' announcements
  const TYPING_MS = 300;  // quiet time after typing in a filter before the list follows
  const MAX_KINDS = 200;  // kinds remembered for the kind filter's suggestions
  const STATES = ["runnable", "delayed", "leased", "done", "dead", "cancelled", "all"];
  const SORTS = ["oldest", "newest"];
  const PAGE_SIZES = [20, 50, 100, 500];
  const DEFAULTS = { state: "runnable", limit: 50, sort: "oldest" };
  const ROW_ACTIONS = [["requeue", "Requeue"], ["run_now", "Run now"], ["cancel", "Cancel"]];  // delete: on the job's page
  const $ = (id) => document.getElementById(id);
  const view = {
    state: DEFAULTS.state, kind: "", q: "", sort: DEFAULTS.sort, offset: 0, limit: DEFAULTS.limit,
    selected: null, queue: "", defaultQueue: "", kinds: new Set(), picked: new Set(), shown: [],
    lastStats: "", ticks: 0, listSeq: 0, detailSeq: 0, now: Date.now() / 1000, loading: Promise.resolve(),
  };

  function say(text, isError) {
    const box = $("message");
    box.textContent = text || "";
    box.className = isError ? "error" : "";
  }

  // Every API call names the queue on show; the server opens only queues it lists.
  function withQueue(path) {
    if (!view.queue) return path;
    return path + (path.includes("?") ? "&" : "?") + "queue=" + encodeURIComponent(view.queue);
  }

  async function api(path, options) {
    if (!path.startsWith("/api/queues")) path = withQueue(path);
    const opts = Object.assign({ credentials: "same-origin", headers: {} }, options || {});
    if (opts.method === "POST") {
      opts.headers = Object.assign({ "Content-Type": "application/json", "X-CSRF-Token": CSRF }, opts.headers);
      opts.body = JSON.stringify(opts.body || {});
    }
    const response = await fetch(path, opts);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      const reason = data && typeof data.error === "string" ? data.error : "HTTP " + response.status;
      const error = new Error(reason);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  // ---------------------------------------------------------------- counts
  // The list is read before the counts and both are drawn together, so a row on show is always
  // counted: the counts are as new as the list or newer.
  async function refreshStats() {
    try {
      // The list is small (one page of previews): redraw it every round, so waiting times, lease
      // deadlines and stages stay current. A search reads up to thousands of jobs, and newest first
      // with a kind counts the list: less often.
      const heavy = view.q || (view.kind && view.sort === "newest");
      const listed = !heavy || view.ticks % HEAVY_EVERY === 0 ? await fetchJobs() : null;
      const data = await api("/api/stats");
      if (view.queue && data.queue !== view.queue) return;  // an answer for the queue shown before a switch
      view.now = data.now;
      view.queue = data.queue;
      $("queue-name").textContent = data.queue;
      $("durable").textContent = data.durable ? "durable (fsync on)" : "NOT durable (fsync off)";
      for (const key of ["ready", "delayed", "leased", "done", "dead", "cancelled", "total"]) {
        $("count-" + key).textContent = String(data.stats[key] || 0);  // cancelled: absent while 0
      }
      const shownAt = Date.now() / 1000;
      $("updated").textContent = clockTime(shownAt);
      $("updated").title = utcTime(shownAt);
      $("zone").textContent = zoneLabel(shownAt);
      $("status").textContent = "live";
      $("status").className = "";
      if (listed) await drawJobs(listed);
      const signature = JSON.stringify(data.stats);
      if (view.ticks % CHART_EVERY === 0) await refreshChart();
      if (view.ticks % WORKERS_EVERY === 0) await Promise.all([refreshWorkers(), refreshControl()]);
      view.ticks += 1;
      if (view.ticks % QUEUES_EVERY === 0) await loadQueues();
      // The detail may hold a large payload: reload it when the counts move, else now and then.
      if (view.selected && (signature !== view.lastStats || view.ticks % DETAIL_EVERY === 0)) {
        await showJob(view.selected, true);
      }
      view.lastStats = signature;
    } catch (err) {
      if (err.status === 404 && view.defaultQueue && view.queue !== view.defaultQueue) {
        // The address named a queue that is not here (or no longer): say so, show the default one.
        say(err.message, true);
        switchQueue(view.defaultQueue, false, true);
        return;
      }
      $("status").textContent = "disconnected: " + err.message;
      $("status").className = "bad";
    }
  }

  // ---------------------------------------------------------------- chart and workers
  async function refreshChart() {
    const queue = view.queue;
    try {
      const data = await api("/api/history");
      if (data.queue === queue) pagePanels.drawChart($("chart"), data);
    } catch (err) {
      // the counts say when the server is gone
    }
  }

  async function refreshWorkers() {
    const queue = view.queue;
    let data;
    try {
      data = await api("/api/workers");
    } catch (err) {
      return;
    }
    if (data.queue !== queue) return;
    $("workers").replaceChildren(...pagePanels.workerRows(data.workers, data.now));
    $("workers-empty").hidden = data.workers.length !== 0;
    const gone = data.workers.filter((w) => w.gone).length;
    $("workers-note").textContent = data.workers.length
      ? (data.workers.length - gone) + " live" + (gone ? ", " + gone + " gone" : "") : "";
  }

  // The schedules, the limits and what is paused (read-only panels, and the banner).
  async function refreshControl() {
    const queue = view.queue;
    let schedules, limits;
    try {
      [schedules, limits] = await Promise.all([api("/api/schedules"), api("/api/limits")]);
    } catch (err) {
      return;  // the counts say when the server is gone
    }
    if (schedules.queue === queue && limits.queue === queue) pageControl.drawControl(schedules, limits);
  }

  // ---------------------------------------------------------------- queues
  // Every queue of the folder or database, each with its counts; a click shows it.
  async function loadQueues() {
    let data;
    try {
      data = await api("/api/queues?counts=1");
    } catch (err) {
      return;  // the list is a convenience; the counts say when the server is gone
    }
    view.defaultQueue = data["default"];
    if (!view.queue) {
      view.queue = data["default"];
      syncUrl(false);
    }
    $("queues").replaceChildren(...data.queues.map((name) => queueButton(name, data.stats[name], data.errors[name])));
  }

  function queueButton(name, stats, error) {
    let summary = "not counted (too many queues)";
    if (stats) {
      summary = stats.ready + " ready · " + stats.delayed + " delayed · " + stats.leased + " leased · "
        + stats.dead + " dead · " + stats.total + " in all";
    } else if (error) {
      summary = "cannot be read";
    }
    return el("button", {
      class: "queue", "data-queue": name, "aria-current": String(name === view.queue), title: error || summary,
      onclick: () => switchQueue(name, true),
    }, [el("span", { class: "qname", text: name }), el("span", { class: "qcounts", text: summary })]);
  }

  // Show queue ``name``; ``push`` makes it a step of the history, ``keepMessage`` leaves the message line.
  function switchQueue(name, push, keepMessage) {
    if (name === view.queue) return;
    view.queue = name;
    view.offset = 0;
    view.lastStats = "";
    view.ticks = 0;  // the chart and the workers of the new queue at once
    view.picked.clear();
    view.listSeq += 1;  // answers still coming for the previous queue must not draw
    view.detailSeq += 1;
    clearDetail(true);  // the address changes just below
    if (!keepMessage) say("");
    showQueueName();
    syncUrl(push);
    refreshStats();
  }

  function showQueueName() {
    $("queue-name").textContent = view.queue || "…";
    for (const button of document.querySelectorAll("#queues button.queue")) {
      button.setAttribute("aria-current", String(button.getAttribute("data-queue") === view.queue));
    }
  }

  // ---------------------------------------------------------------- the address
  // The address names what is on show (the queue, the tab, the page, the job), so it can be shared or reloaded.
  function syncUrl(push) {
    const params = new URLSearchParams();
    if (view.queue) params.set("queue", view.queue);
    if (view.state !== DEFAULTS.state) params.set("state", view.state);
    if (view.kind) params.set("kind", view.kind);
    if (view.q) params.set("q", view.q);
    if (view.sort !== DEFAULTS.sort) params.set("sort", view.sort);
    if (view.limit !== DEFAULTS.limit) params.set("limit", String(view.limit));
    if (view.offset > 0) params.set("offset", String(view.offset));
    if (view.selected) params.set("job", view.selected);
    const target = location.pathname + (params.toString() ? "?" + params.toString() : "");
    if (target === location.pathname + location.search) return;
    if (push) history.pushState(null, "", target);
    else history.replaceState(null, "", target);
  }

  // The view an address names; anything it does not say (or says wrongly) takes the default.
  function readUrl() {
    const params = new URLSearchParams(location.search);
    view.queue = params.get("queue") || "";
    const state = params.get("state");
    view.state = STATES.includes(state) ? state : DEFAULTS.state;
    view.kind = params.get("kind") || "";
    view.q = (params.get("q") || "").trim();
    const sort = params.get("sort");
    view.sort = SORTS.includes(sort) ? sort : DEFAULTS.sort;
    const limit = Number(params.get("limit"));
    view.limit = PAGE_SIZES.includes(limit) ? limit : DEFAULTS.limit;
    const offset = Number(params.get("offset"));
    view.offset = Number.isInteger(offset) && offset > 0 ? offset : 0;
    view.selected = params.get("job") || null;
    showQueueName();
    showControls();
  }

  // The tabs, the filters and the page size as the view says.
  function showControls() {
    for (const b of document.querySelectorAll("#tabs button")) {
      b.setAttribute("aria-pressed", String(b.getAttribute("data-state") === view.state));
    }
    $("filter-kind").value = view.kind;
    $("filter-q").value = view.q;
    $("sort").value = view.sort;
    $("page-size").value = String(view.limit);
  }

  // ---------------------------------------------------------------- lists
  async function refreshJobs() {
    await drawJobs(await fetchJobs());
  }

  // One page of the list as the view asks for it; null when it could not be read.
  async function fetchJobs() {
    const params = new URLSearchParams({ state: view.state, sort: view.sort, limit: String(view.limit), offset: String(view.offset) });
    if (view.kind) params.set("kind", view.kind);
    if (view.q) params.set("q", view.q);
    // Only the latest request may draw: a slow answer for the previous tab must not win.
    const mine = ++view.listSeq;
    try {
      return { mine: mine, data: await api("/api/jobs?" + params.toString()) };
    } catch (err) {
      if (mine === view.listSeq) say("Could not list jobs: " + err.message, true);
      return null;
    }
  }

  async function drawJobs(listed) {
    if (listed === null || listed.mine !== view.listSeq) return;
    const data = listed.data;
    if (data.jobs.length === 0 && view.offset > 0) {
      view.offset = Math.max(0, view.offset - view.limit);
      return refreshJobs();
    }
    const focused = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest("tr.job") : null;
    const focusId = focused ? focused.getAttribute("data-job-id") : null;
    const rows = data.jobs.map(jobRow);
    view.shown = data.jobs.map((job) => job.id);
    $("jobs").replaceChildren(...rows);
    showPicked();
    // Redrawing must not steal the keyboard user's place in the list.
    const again = focusId === null ? null : rows.find((row) => row.getAttribute("data-job-id") === focusId);
    if (again) again.focus();
    $("jobs-empty").hidden = rows.length !== 0;
    $("jobs-empty").textContent = view.q || view.kind ? "No job here matches." : "No jobs here.";
    $("prev").disabled = view.offset === 0;
    $("next").disabled = !data.has_more;
    const shown = rows.length ? (view.offset + 1).toLocaleString() + "–" + (view.offset + rows.length).toLocaleString() : "";
    $("page-info").textContent = shown && data.total != null && !view.q ? shown + " of " + data.total.toLocaleString() : shown;
    $("list-note").hidden = !(view.q && data.complete === false);
    if (view.q && data.complete === false) {
      // A search reads a bounded number of jobs: say how far it got and how to reach the rest.
      $("list-note").textContent = "Searched the " + view.sort + " " + data.scanned.toLocaleString()
        + " jobs of this list only: choose a state or a kind to search the rest. A whole job id is always found.";
    }
    for (const job of data.jobs) {
      if (view.kinds.size < MAX_KINDS && !view.kinds.has(job.kind)) {
        view.kinds.add(job.kind);
        $("kinds").append(el("option", { value: job.kind }));
      }
    }
    $("dlq-actions").hidden = view.state !== "dead";
  }

  function jobRow(job) {
    const info = pageControl.infoOf(job, view.now);
    // Each cell is labelled for the phone layout, where the row becomes a card.
    const pick = el("input", {
      type: "checkbox", "aria-label": "select job " + job.id, "data-pick": job.id,
      onclick: (ev) => ev.stopPropagation(),
      onchange: (ev) => { if (ev.target.checked) view.picked.add(job.id); else view.picked.delete(job.id); showPicked(); },
    });
    pick.checked = view.picked.has(job.id);
    const cells = [
      el("td", { class: "pick", "data-label": "select" }, [pick]),
      el("td", { class: "mono id", "data-label": "id" }, [el("span", { class: "cut", text: job.id, title: job.id })]),
      el("td", { class: "kind", "data-label": "kind" }, [el("span", { class: "cut", text: job.kind, title: job.kind })]),
      el("td", { "data-label": "state", text: job.state === "ready" && job.available_at > view.now ? "delayed" : job.state }),
      el("td", { "data-label": "prio", text: job.priority }),
      el("td", { "data-label": "tries", text: job.attempts + "/" + job.max_attempts }),
      el("td", { class: "clip", text: info[0], title: info[1] }),
      el("td", { class: "mono clip payload", text: job.payload_preview, title: job.payload_preview }),
    ];
    const actions = el("td");
    const can = pageControl.allowed(job, view.now);
    for (const [action, label] of ROW_ACTIONS) {
      if (!can[action]) continue;
      actions.append(el("button", {
        text: label, "data-action": action, "data-job-id": job.id,
        onclick: (ev) => { ev.stopPropagation(); jobAction(action, job.id); },
      }));
    }
    cells.push(actions);
    const row = el("tr", {
      class: "job" + (job.id === view.selected ? " selected" : ""), "data-job-id": job.id, tabindex: 0,
      onclick: () => showJob(job.id, false),
      onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); showJob(job.id, false); } },
    }, cells);
    return row;
  }

  // ---------------------------------------------------------------- detail
  // Show job ``id`` in full. ``quiet``: a refresh of the job on show (no message if it is gone);
  // ``fromUrl``: the address named it already, so the history gains no step.
  function showJob(id, quiet, fromUrl) {
    const loading = loadJob(id, quiet, fromUrl);
    // What removing the job on show waits for (closeBeforeRemoving): every load on its way, not
    // only the last, since a refresh may start while another load still waits for its answer.
    view.loading = Promise.all([view.loading, loading.catch(() => {})]);
    return loading;
  }

  async function loadJob(id, quiet, fromUrl) {
    if (quiet && id !== view.selected) return;  // a refresh of a job no longer on show
    const opened = view.selected !== id;
    // Chosen at once, so a refresh that starts while this loads reloads this job, not the one before.
    view.selected = id;
    if (!quiet) syncUrl(opened && !fromUrl);
    const mine = ++view.detailSeq;
    let data;
    try {
      data = await api("/api/jobs/" + encodeURIComponent(id));
      if (mine !== view.detailSeq) return;
    } catch (err) {
      if (mine !== view.detailSeq) return;
      if (!quiet) say("Could not load job " + id + ": " + err.message, true);
      clearDetail();
      return;
    }
    const job = data.job;
    for (const row of document.querySelectorAll("tr.job")) {
      row.classList.toggle("selected", row.getAttribute("data-job-id") === job.id);
    }
    $("detail-title").textContent = job.id;
    $("detail-hint").hidden = true;
    pageControl.drawJob(job, view.now);
    if (opened) pageControl.drawReasons([]);  // another job's reasons must not stand under this one
    $("detail").hidden = false;
    if (view.selected !== id) return;  // closed meanwhile (deleted): nothing to explain
    try {
      const why = await api("/api/jobs/" + encodeURIComponent(id) + "/explain");
      if (mine === view.detailSeq) pageControl.drawReasons(why.reasons);
    } catch (err) {
      if (mine === view.detailSeq) pageControl.drawReasons([{ code: "error", text: "could not explain: " + err.message }]);
    }
  }

  // Close the detail; the address stops naming the job unless ``keepUrl`` (it was read from the address).
  function clearDetail(keepUrl) {
    const had = view.selected !== null;
    view.selected = null;
    $("detail").hidden = true;
    $("detail-hint").hidden = false;
    $("detail-title").textContent = "Select a job";
    if (had && !keepUrl) syncUrl(false);
  }

  // Before an action removes the job on show: close its page, and let a load of it already on its
  // way end first, so that nothing asks the server for the job while it goes, or after.
  async function closeBeforeRemoving() {
    clearDetail();
    view.detailSeq += 1;
    await view.loading;
  }

  // ---------------------------------------------------------------- actions
  // One POST; its outcome goes to the message line, then the counts and the list are read afresh.
  async function act(path, body, done, failed) {
    try {
      say(done(await api(path, { method: "POST", body: body })));
    } catch (err) {
      say(failed + ": " + err.message, true);
    }
    view.lastStats = "";
    await refreshStats();
  }

  // The per-job actions: [the route's last part, the question first asked (none: ask nothing), what was done].
  const ACTIONS = {
    requeue: ["requeue", null, (job) => "Requeued 1 job: " + job.id],
    cancel: ["cancel", "A ready job is cancelled at once; a running one is told to stop.",
      (job) => (job.state === "cancelled" ? "Cancelled job: " : "Asked the worker running it to stop: ") + job.id],
    run_now: ["run-now", null, (job) => "Runnable now: " + job.id],
    "delete": ["delete", "It is removed for good, in whatever state it is; this cannot be undone.", (job) => "Deleted job: " + job.id],
  };
  const VERBS = { requeue: ["Requeue", "Requeued"], cancel: ["Cancel", "Cancelled"], run_now: ["Run now", "Made runnable"], "delete": ["Delete", "Deleted"] };

  async function jobAction(action, id) {
    const [route, question, done] = ACTIONS[action];
    if (question && !window.confirm(VERBS[action][0] + " job " + id + "? " + question)) return;
    if (action === "delete" && id === view.selected) await closeBeforeRemoving();  // a refusal is said in the message
    return act("/api/jobs/" + encodeURIComponent(id) + "/" + route, null, (data) => done(data.job), VERBS[action][0] + " failed");
  }

  // The selection: ids picked on this page (and kept across its redraws); cleared on another tab or queue.
  function showPicked() {
    const n = view.picked.size;
    $("bulk-actions").hidden = n === 0;
    $("picked-count").textContent = n + " selected";
    const onPage = view.shown.filter((id) => view.picked.has(id)).length;
    $("pick-all").checked = view.shown.length > 0 && onPage === view.shown.length;
    $("pick-all").indeterminate = onPage > 0 && onPage < view.shown.length;
  }

  function pickAll() {
    const all = $("pick-all").checked;
    for (const id of view.shown) { if (all) view.picked.add(id); else view.picked.delete(id); }
    for (const box of document.querySelectorAll("#jobs input[data-pick]")) box.checked = all;
    showPicked();
  }

  function clearPicked() {
    view.picked.clear();
    for (const box of document.querySelectorAll("#jobs input[data-pick]")) box.checked = false;
    showPicked();
  }

  async function bulk(action) {
    const ids = Array.from(view.picked);
    const [verb, did] = VERBS[action];
    const warning = action === "delete" ? " They are removed for good; this cannot be undone." : "";
    if (!ids.length || !window.confirm(verb + " " + ids.length + " selected job(s)?" + warning)) return;
    if (action === "delete" && ids.includes(view.selected)) await closeBeforeRemoving();
    await act("/api/bulk", { action: action, ids: ids }, (data) => {
      const refused = Object.keys(data.refused);
      for (const id of data.done) view.picked.delete(id);
      return did + " " + data.done.length + " job(s)"
        + (refused.length ? "; refused " + refused.length + " (" + refused.slice(0, 3).map((id) => id + ": " + data.refused[id]).join("; ")
          + (refused.length > 3 ? "; …" : "") + ")" : "") + ".";
    }, verb + " failed");
    showPicked();
  }

  function requeueAll() {
    if (!window.confirm("Requeue every dead job? Their attempts start again from 0.")) return;
    return act("/api/dlq/requeue", null, (data) => "Requeued " + data.requeued + " dead job(s).", "Requeue failed");
  }

  function compact() {
    if (!window.confirm("Compact the queue? Done jobs are dropped for good; everything else is kept.")) return;
    return act("/api/compact", null, (data) => "Compacted: kept " + data.compaction.jobs_kept + ", dropped "
      + data.compaction.jobs_dropped + " done job(s).", "Compaction failed");
  }

  function openPurge() {
    if (!window.confirm("Purge deletes EVERY job in queue " + view.queue + ". Continue?")) return;
    $("purge-name").textContent = view.queue;
    $("purge-input").value = "";
    $("purge-confirm").disabled = true;
    $("purge-dialog").showModal();
    $("purge-input").focus();
  }

  async function purge(ev) {
    ev.preventDefault();
    const typed = $("purge-input").value;
    $("purge-dialog").close();
    if (typed !== view.queue) return;
    await closeBeforeRemoving();  // every job is about to go, the one on show with them
    await act("/api/purge", { confirm: typed }, (data) => "Purged " + data.purged + " job(s).", "Purge failed");
  }

  // ---------------------------------------------------------------- wiring
  // A change of what the list shows: the address follows, then the list.
  function relist() {
    syncUrl(false);
    refreshJobs();
  }
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => {
      view.state = button.getAttribute("data-state");
      view.offset = 0;
      view.picked.clear();
      showControls();
      relist();
    });
  }
  // Typing waits for a pause; the list (and the address) then follow the filters.
  let typing = null;
  function filtersChanged(now) {
    clearTimeout(typing);
    typing = setTimeout(() => {
      const kind = $("filter-kind").value.trim();
      const q = $("filter-q").value.trim();
      const sort = $("sort").value;
      if (kind === view.kind && q === view.q && sort === view.sort) return;
      Object.assign(view, { kind: kind, q: q, sort: sort, offset: 0 });
      relist();
    }, now ? 0 : TYPING_MS);
  }
  $("filter-kind").addEventListener("input", () => filtersChanged(false));
  $("filter-q").addEventListener("input", () => filtersChanged(false));
  $("sort").addEventListener("change", () => filtersChanged(true));
  $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); filtersChanged(true); });
  $("prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - view.limit); relist(); });
  $("next").addEventListener("click", () => { view.offset += view.limit; relist(); });
  $("page-size").addEventListener("change", () => { view.limit = Number($("page-size").value); view.offset = 0; relist(); });
  $("requeue-all").addEventListener("click", requeueAll);
  for (const action of Object.keys(ACTIONS)) {
    $("detail-" + action.replace("_", "-")).addEventListener("click", () => { if (view.selected) jobAction(action, view.selected); });
  }
  $("pick-all").addEventListener("change", pickAll);
  $("bulk-clear").addEventListener("click", clearPicked);
  for (const button of document.querySelectorAll("#bulk-actions button[data-bulk]")) {
    button.addEventListener("click", () => bulk(button.getAttribute("data-bulk")));
  }
  $("detail-refresh").addEventListener("click", () => { if (view.selected) showJob(view.selected, false); });
  $("compact").addEventListener("click", compact);
  $("purge").addEventListener("click", openPurge);
  $("purge-input").addEventListener("input", () => { $("purge-confirm").disabled = $("purge-input").value !== view.queue; });
  $("purge-cancel").addEventListener("click", () => $("purge-dialog").close());
  $("purge-form").addEventListener("submit", purge);
  // Back and forward: show what the address names now.
  window.addEventListener("popstate", () => {
    const before = view.queue;
    readUrl();
    view.lastStats = "";
    view.listSeq += 1;
    view.detailSeq += 1;
    if (view.selected) showJob(view.selected, false, true);
    else clearDetail(true);
    if (view.queue !== before || !view.queue) refreshStats();
    else refreshJobs();
  });

  // A timer that waits for each round to finish, so a slow queue never piles up requests.
  async function loop() {
    await refreshStats();
    setTimeout(loop, REFRESH_MS);
  }
  readUrl();
  loadQueues().then(() => {
    if (view.selected) showJob(view.selected, false, true);
    loop();
  });
})();
