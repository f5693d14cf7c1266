// A job's page and the queue's control, drawn from the API's answers: a job's line in the list, its fields and
// attempts, why it is not running (explain), which actions its state allows, the schedules, the limits and what
// is paused.
// Between page-panels.js and page.js in the one script; every text goes in through textContent.
const pageControl = (function () {
  const { el, stamp, duration, relTime, moment, localTime, utcTime } = pageFormat;
  const $ = (id) => document.getElementById(id);

  // The per-job actions a job's state allows (the API refuses the others with 409).
  function allowed(job, now) {
    const delayed = job.state === "ready" && job.available_at > now;
    return {
      cancel: (job.state === "ready" || job.state === "leased") && !job.cancel_requested,
      requeue: job.state === "dead",  // retry: ready again with its attempts reset
      run_now: delayed,  // a delayed or backing-off job; a runnable one runs anyway
      "delete": job.state !== "leased",
    };
  }

  // One short line for the list: what the job is waiting for, or why it died (its title: the moment, local and UTC).
  function infoOf(job, now) {
    const rel = (t) => relTime(t, now);
    if (job.state === "dead") return ["error: " + (job.last_error == null ? "–" : job.last_error), job.last_error || ""];
    if (job.state === "leased") {
      const stage = job.stage == null ? "" : " · " + job.stage;
      return ["lease ends " + rel(job.lease_deadline) + stage, moment(job.lease_deadline)];
    }
    if (job.state === "ready" && job.available_at > now) return ["runs " + rel(job.available_at), moment(job.available_at)];
    if (job.state === "ready") {
      const waited = now - job.available_at;
      return [waited < 1 ? "ready now" : "waiting " + duration(waited), moment(job.available_at)];
    }
    return ["enqueued " + rel(job.enqueued_at), moment(job.enqueued_at)];
  }

  // A time as "local (in 5 min)", UTC in its title; "–" for none.
  const when = (t, now) => { const s = stamp(t, now); return el("span", { text: s.text, title: s.title }); };

  // One row per attempt, oldest first: its number, when it started and finished, how long, by whom, how it ended.
  function attemptRows(attempts, now) {
    return attempts.map((a) => el("tr", { class: "attempt outcome-" + a.outcome, "data-attempt": a.attempt }, [
      el("td", { "data-label": "attempt", text: a.attempt }),
      el("td", { "data-label": "started" }, [when(a.started, now)]),
      el("td", { "data-label": "finished" }, [a.finished == null ? el("span", { text: "–" }) : when(a.finished, now)]),
      el("td", { "data-label": "took", text: a.seconds == null ? (a.started == null ? "–" : duration(now - a.started) + " so far")
        : a.seconds < 10 ? a.seconds.toFixed(2) + " s" : duration(a.seconds) }),
      el("td", { "data-label": "worker", class: "mono", text: a.by == null ? "–" : a.by }),
      el("td", { "data-label": "outcome", class: "outcome", text: a.outcome }),
    ]));
  }

  // The job in full into the detail panel: fields (times local, UTC in titles), payload, error, traceback, result,
  // attempts, and the action buttons its state allows.
  function drawJob(job, now) {
    const fields = [
      ["state", job.state === "ready" && job.available_at > now ? "ready (delayed)" : job.state],
      ["kind", job.kind], ["priority", job.priority],
      ["attempts", job.attempts + " of " + job.max_attempts],
      ["time limit", job.timeout == null ? "– (the worker's, if it has one)" : job.timeout + " s"],
      ["stage", job.stage == null ? "–" : job.stage],
      ["dedupe key", job.dedupe_key == null ? "–" : job.dedupe_key],
      ["enqueued", stamp(job.enqueued_at, now)], ["available", stamp(job.available_at, now)],
      ["lease deadline", stamp(job.lease_deadline, now)], ["seq", job.seq],
    ];
    if (job.cancel_requested) fields.splice(1, 0, ["cancel", "requested: its worker is told at its next heartbeat"]);
    // A time is shown local, with UTC as its title; every other value is plain text.
    const dd = (v) => (v !== null && typeof v === "object" ? el("dd", { text: v.text, title: v.title }) : el("dd", { text: v }));
    $("detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", { text: k }), dd(v)]));
    $("detail-payload").textContent = JSON.stringify(job.payload, null, 2);
    $("detail-error").textContent = job.last_error == null ? "–" : job.last_error;
    $("detail-traceback").textContent = job.traceback == null ? "" : job.traceback;  // text, never markup
    $("detail-traceback").hidden = $("detail-traceback-label").hidden = job.traceback == null;
    $("detail-result").textContent = job.result == null ? "–" : JSON.stringify(job.result, null, 2);
    const attempts = job.attempt_history || [];
    $("detail-attempts").replaceChildren(...attemptRows(attempts, now));
    $("detail-attempts-empty").hidden = attempts.length !== 0;
    const can = allowed(job, now);
    for (const action of Object.keys(can)) $("detail-" + action.replace("_", "-")).hidden = !can[action];
  }

  // Why the job is where it is: one line per reason, most important first. The server writes its times in UTC;
  // each one a reason carries as a fact is shown in the page's zone, the server's words (UTC) in the title.
  function drawReasons(reasons) {
    $("detail-explain").replaceChildren(...reasons.map((r) => {
      let text = r.text;
      for (const value of Object.values(r)) {
        if (typeof value === "number" && value > 0 && text.includes(utcTime(value))) text = text.split(utcTime(value)).join(localTime(value));
      }
      return el("li", { "data-code": r.code, text: text, title: text === r.text ? "" : r.text });
    }));
  }

  // The schedules: name, how often (every N s, or cron and its zone), kind, next run (local, UTC in the title), catch-up.
  function scheduleRows(schedules, now) {
    return schedules.map((s) => el("tr", { class: "schedule", "data-schedule": s.name }, [
      el("td", { "data-label": "name" }, [el("span", { class: "cut", text: s.name, title: s.name })]),
      el("td", { "data-label": "runs", class: "mono", text: s.cron == null ? "every " + s.every + " s"
        : s.cron + (s.tz ? " (" + s.tz + ")" : " (UTC)") }),
      el("td", { "data-label": "kind" }, [el("span", { class: "cut", text: s.kind, title: s.kind })]),
      el("td", { "data-label": "next run" }, [when(s.next_run, now)]),
      el("td", { "data-label": "catch up", text: s.catch_up }),
    ]));
  }

  // A limit's columns: one line each, so a field the Limit gains is one more line here (and a <th> in page.html).
  const LIMIT_FIELDS = [
    ["concurrency", (l) => (l.concurrency == null ? "–" : l.concurrency + " at once")],
    ["rate", (l) => (l.rate == null ? "–" : l.rate + " per " + (l.per === 1 ? "s" : l.per + " s"))],
    ["burst", (l) => (l.rate == null ? "–" : l.burst == null ? String(l.rate) : String(l.burst))],
    ["groups", groupsText],
  ];

  // A limit's part per group: "2 at once each", and whether the groups take turns (and their weights).
  function groupsText(l) {
    const parts = [];
    if (l.group_concurrency != null) parts.push(l.group_concurrency + " at once each");
    if (l.weights != null) {
      parts.push(["take turns"].concat(Object.entries(l.weights).map(([group, weight]) => group + " × " + weight)).join(", "));
    }
    return parts.length ? parts.join("; ") : "–";
  }

  function limitRows(limits, paused) {
    return limits.map((l) => el("tr", { class: "limit", "data-kind": l.kind }, [
      el("td", { "data-label": "kind" }, [el("span", { class: "cut", text: l.kind, title: l.kind })]),
      ...LIMIT_FIELDS.map(([name, show]) => el("td", { "data-label": name, text: show(l) })),
      el("td", { "data-label": "paused", class: paused.includes(l.kind) ? "bad" : "", text: paused.includes(l.kind) ? "paused" : "no" }),
    ]));
  }

  // What is paused, in words for the banner ("" for nothing): null in the list is the whole queue.
  function pausedText(paused) {
    const kinds = paused.filter((k) => k !== null);
    const parts = [];
    if (paused.includes(null)) parts.push("The whole queue is paused: no job is leased until it is resumed (nobroker resume).");
    if (kinds.length) parts.push("Paused kind" + (kinds.length > 1 ? "s" : "") + ": " + kinds.join(", ")
      + " (nobroker resume --kind " + (kinds.length > 1 ? "KIND" : kinds[0]) + ").");
    return parts.join(" ");
  }

  function drawControl(schedules, limits) {
    $("schedules").replaceChildren(...scheduleRows(schedules.schedules, schedules.now));
    $("schedules-empty").hidden = schedules.schedules.length !== 0;
    $("limits").replaceChildren(...limitRows(limits.limits, limits.paused));
    $("limits-empty").hidden = limits.limits.length !== 0;
    const text = pausedText(limits.paused);
    $("paused-banner").textContent = text;
    $("paused-banner").hidden = !text;
  }

  return { allowed, infoOf, attemptRows, drawJob, drawReasons, scheduleRows, limitRows, pausedText, drawControl };
})();
