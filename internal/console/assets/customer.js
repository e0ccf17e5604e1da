// The customer page: signs in with a credential kept in this tab's
// sessionStorage, sends it as a bearer header to the data API and renders
// what it returns. Every value from the server is put into the page as text
// (textContent), never as markup.
(function () {
  "use strict";
  var KEY = "gateway.console.credential";
  var $ = function (id) { return document.getElementById(id); };
  var ledgerCursor = "";
  var usage = {};
  var chart = null;
  // me is the single sign-on session (GET /console/api/me) when there is
  // one: the data API is then read with its cookie, within its roles.
  var me = null;

  function credential() { return sessionStorage.getItem(KEY) || ""; }

  function signedOut(message) {
    sessionStorage.removeItem(KEY);
    me = null;
    $("who").hidden = true;
    $("keys-link").hidden = true;
    $("dashboard").hidden = true;
    $("signout").hidden = true;
    $("signin-section").hidden = false;
    $("signin-error").textContent = message || "";
    if (chart) { chart.destroy(); chart = null; }
    $("token").focus();
  }

  // get reads a data API path; a refused credential signs out.
  function get(path) {
    var init = me ? { cache: "no-store", credentials: "same-origin", referrerPolicy: "no-referrer" }
      : { headers: { "Authorization": "Bearer " + credential() }, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
    return fetch(path, init).then(function (resp) {
      if (resp.status === 401) {
        signedOut("The gateway did not accept this token or key.");
        throw new Error("unauthenticated");
      }
      if (!resp.ok) {
        return resp.json().catch(function () { return {}; }).then(function (b) {
          var msg = (b && b.error && b.error.message) || ("HTTP " + resp.status);
          throw new Error(msg);
        });
      }
      return resp;
    });
  }
  function getJSON(path) { return get(path).then(function (r) { return r.json(); }); }

  // usd formats an amount exactly to the nano-USD, with at least two decimals.
  function usd(v) {
    if (typeof v !== "number") { return "–"; }
    var s = Math.abs(v).toFixed(9).replace(/0+$/, "");
    var dot = s.indexOf(".");
    while (s.length - dot - 1 < 2) { s += "0"; }
    return (v < 0 ? "-" : "") + s;
  }
  function int(v) { return typeof v === "number" ? v.toLocaleString("en-US") : "–"; }
  var names = { rpm: "Requests per minute", tpm: "Tokens per minute", window_minutes: "Window (minutes)",
    concurrency: "Requests at once", in_flight: "Requests in flight", held_usd: "Held for requests in flight (USD)",
    leased_usd: "Leased for requests to come (USD)" };
  function label(k) {
    if (names[k]) { return names[k]; }
    var s = String(k).replace(/_usd$/, " (USD)").replace(/_/g, " ");
    return s.charAt(0).toUpperCase() + s.slice(1);
  }
  function text(tag, value, cls) {
    var el = document.createElement(tag);
    el.textContent = value == null ? "" : String(value);
    if (cls) { el.className = cls; }
    return el;
  }
  function clear(el) { while (el.firstChild) { el.removeChild(el.firstChild); } }
  function status(msg) { $("status").textContent = msg; }

  function showSummary() {
    $("balance").textContent = "$" + usd(usage.day.balance_usd);
    ["day", "month", "total"].forEach(function (p) {
      $("spend-" + p).textContent = "$" + usd(usage[p].usage.cost_usd);
      $("requests-" + p).textContent = int(usage[p].usage.requests);
    });
  }

  // scalar renders a value of unknown meaning: amounts by their _usd name.
  function scalar(k, v) {
    if (typeof v === "number" && /_usd$/.test(k)) { return "$" + usd(v); }
    if (typeof v === "number") { return int(v); }
    if (typeof v === "boolean") { return v ? "yes" : "no"; }
    return v == null ? "–" : String(v);
  }

  // generic renders any JSON value as definition rows or a table, so that
  // fields the gateway adds show without a change here.
  function generic(v) {
    if (Array.isArray(v)) {
      if (v.length === 0) { return text("p", "None.", "muted"); }
      var cols = [];
      v.forEach(function (row) {
        if (row && typeof row === "object") {
          Object.keys(row).forEach(function (c) { if (cols.indexOf(c) < 0) { cols.push(c); } });
        }
      });
      var table = document.createElement("table");
      var hr = document.createElement("tr");
      cols.forEach(function (c) { var th = text("th", label(c)); th.scope = "col"; hr.appendChild(th); });
      table.appendChild(document.createElement("thead")).appendChild(hr);
      var body = table.appendChild(document.createElement("tbody"));
      v.forEach(function (row) {
        var tr = body.appendChild(document.createElement("tr"));
        cols.forEach(function (c) {
          var cell = row ? row[c] : null;
          tr.appendChild(cell && typeof cell === "object" ? wrap("td", generic(cell)) : text("td", scalar(c, cell)));
        });
      });
      return wrap("div", table, "scroll");
    }
    if (v && typeof v === "object") { return limitsTable(v); }
    return text("span", scalar("", v));
  }
  function wrap(tag, child, cls) { var el = document.createElement(tag); if (cls) { el.className = cls; } el.appendChild(child); return el; }

  // limitsTable shows each limit with how much of it is used where the
  // record says: NAME_usd with NAME_used_usd, tpm with tokens_this_minute,
  // concurrency with in_flight. A zero limit is no limit.
  var usedNames = { tpm: "tokens_this_minute", concurrency: "in_flight" };
  function usedKey(obj, k) {
    var u = /_usd$/.test(k) ? k.replace(/_usd$/, "_used_usd") : usedNames[k];
    return u && (u in obj) ? u : "";
  }
  function limitsTable(obj) {
    var table = document.createElement("table");
    var hr = document.createElement("tr");
    ["Limit", "Value", "Used", ""].forEach(function (h) { var th = text("th", h); th.scope = "col"; hr.appendChild(th); });
    table.appendChild(document.createElement("thead")).appendChild(hr);
    var body = table.appendChild(document.createElement("tbody"));
    var partners = {};
    var keys = Object.keys(obj);
    keys.forEach(function (k) { var u = usedKey(obj, k); if (u) { partners[u] = true; } });
    // What leases set aside goes beside what requests in flight hold:
    // both are money neither spent nor spendable.
    if (keys.indexOf("held_usd") >= 0 && keys.indexOf("leased_usd") >= 0) {
      keys.splice(keys.indexOf("leased_usd"), 1);
      keys.splice(keys.indexOf("held_usd") + 1, 0, "leased_usd");
    }
    keys.forEach(function (k) {
      if (partners[k]) { return; }
      var v = obj[k];
      var tr = body.appendChild(document.createElement("tr"));
      tr.appendChild(text("th", label(k))).scope = "row";
      var u = usedKey(obj, k);
      if (u) {
        var used = obj[u];
        var money = /_usd$/.test(k);
        tr.appendChild(text("td", v > 0 ? scalar(k, v) : "no limit", "num"));
        tr.appendChild(text("td", money ? "$" + usd(used) : int(used), "num"));
        var td = tr.appendChild(document.createElement("td"));
        if (v > 0) {
          var pct = Math.round(100 * used / v);
          var m = document.createElement("meter");
          m.className = "meter"; m.min = 0; m.max = v; m.value = Math.min(used, v); m.high = v * 0.8; m.optimum = 0;
          m.setAttribute("aria-label", label(k) + ": " + pct + "% used");
          td.appendChild(m);
          td.appendChild(text("span", " " + pct + "%"));
        }
        return;
      }
      if (v && typeof v === "object") {
        tr.appendChild(wrap("td", generic(v))).colSpan = 3;
        return;
      }
      tr.appendChild(text("td", v === 0 && /^(rpm|window_minutes)$/.test(k) ? "no limit" : scalar(k, v), "num"));
      tr.appendChild(text("td", ""));
      tr.appendChild(text("td", ""));
    });
    return wrap("div", table, "scroll");
  }

  var known = ["balance_usd", "currency", "period", "limits", "usage", "by_model", "projects"];
  function showLimits() {
    var box = $("limits");
    clear(box);
    box.appendChild(limitsTable(usage.day.limits || {}));
    // Fields the gateway adds to /v1/usage (per-key limits, budgets) show
    // here as they come.
    Object.keys(usage.day).forEach(function (k) {
      if (known.indexOf(k) >= 0) { return; }
      box.appendChild(text("h3", label(k)));
      box.appendChild(generic(usage.day[k]));
    });
  }

  function showByModel() {
    var p = $("period").value;
    var body = $("by-model").tBodies[0];
    clear(body);
    var rows = (usage[p] && usage[p].by_model) || [];
    if (rows.length === 0) {
      var td = text("td", "No requests in this period.", "muted");
      td.colSpan = 7;
      body.appendChild(document.createElement("tr")).appendChild(td);
    }
    rows.forEach(function (m) {
      var tr = body.appendChild(document.createElement("tr"));
      tr.appendChild(text("td", m.model));
      tr.appendChild(text("td", int(m.requests), "num"));
      tr.appendChild(text("td", int(m.input_tokens), "num"));
      tr.appendChild(text("td", int(m.output_tokens), "num"));
      tr.appendChild(text("td", int(m.cache_read_tokens), "num"));
      tr.appendChild(text("td", int(m.cache_write_5m_tokens + m.cache_write_1h_tokens), "num"));
      tr.appendChild(text("td", usd(m.cost_usd), "num"));
    });
  }

  // A project's budget: "used of limit", or "no limit".
  function budget(l, k) {
    if (!l || !(l[k] > 0)) { return "no limit"; }
    return usd(l[k.replace(/_usd$/, "_used_usd")]) + " of " + usd(l[k]);
  }

  function showByProject() {
    var p = $("period").value;
    var body = $("by-project").tBodies[0];
    clear(body);
    var rows = (usage[p] && usage[p].projects) || [];
    rows.forEach(function (pr) {
      var tr = body.appendChild(document.createElement("tr"));
      tr.dataset.project = pr.id;
      tr.appendChild(text("td", pr.name === pr.id ? pr.name : pr.name + " (" + pr.id + ")"));
      tr.appendChild(text("td", int(pr.requests), "num"));
      tr.appendChild(text("td", usd(pr.cost_usd), "num"));
      tr.appendChild(text("td", budget(pr.limits, "daily_usd"), "num"));
      tr.appendChild(text("td", budget(pr.limits, "monthly_usd"), "num"));
      tr.appendChild(text("td", budget(pr.limits, "total_usd"), "num"));
    });
  }

  function showChart(daily) {
    var days = daily.days;
    var xs = days.map(function (d) { return Date.parse(d.date + "T00:00:00Z") / 1000; });
    var ys = days.map(function (d) { return d.cost_usd; });
    var el = $("chart");
    clear(el);
    if (chart) { chart.destroy(); }
    var width = Math.max(280, el.clientWidth || 600);
    chart = new uPlot({
      width: width, height: 300, tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } } },
      axes: [{}, { values: function (u, vals) { return vals.map(function (v) { return "$" + v; }); }, size: 70 }],
      series: [{ label: "Day" }, { label: "Cost (USD)", stroke: "#0b5cad", fill: "rgba(11,92,173,0.12)", width: 2, points: { show: true, size: 4 },
        value: function (u, v) { return v == null ? "–" : "$" + usd(v); } }]
    }, [xs, ys], el);
    el.dataset.points = String(chart.data[0].length);
    el.dataset.first = days.length ? days[0].date : "";
    el.dataset.last = days.length ? days[days.length - 1].date : "";
    var body = $("daily-table").tBodies[0];
    clear(body);
    days.slice().reverse().forEach(function (d) {
      var tr = body.appendChild(document.createElement("tr"));
      tr.appendChild(text("td", d.date));
      tr.appendChild(text("td", int(d.requests), "num"));
      tr.appendChild(text("td", usd(d.cost_usd), "num"));
    });
  }

  function showLedger(page, append) {
    var body = $("ledger").tBodies[0];
    if (!append) { clear(body); }
    if (!append && page.entries.length === 0) {
      var td = text("td", "No requests yet.", "muted");
      td.colSpan = 10;
      body.appendChild(document.createElement("tr")).appendChild(td);
    }
    page.entries.forEach(function (e) {
      var tr = body.appendChild(document.createElement("tr"));
      tr.appendChild(text("td", (e.end_time || e.start_time).replace("T", " ").replace(/\.\d+Z$/, "Z")));
      tr.appendChild(text("td", e.key_label || e.key_id));
      tr.appendChild(text("td", e.model_requested || e.model)); // what the client asked for; by_model shows the priced model
      tr.appendChild(text("td", int(e.input_tokens), "num"));
      tr.appendChild(text("td", int(e.output_tokens), "num"));
      tr.appendChild(text("td", int(e.cache_read_tokens), "num"));
      tr.appendChild(text("td", int(e.cache_write_5m_tokens + e.cache_write_1h_tokens), "num"));
      tr.appendChild(text("td", usd(e.cost_usd), "num"));
      tr.appendChild(text("td", e.status, "num"));
      var flags = tr.appendChild(document.createElement("td"));
      ["estimated", "capped", "interrupted", "reconciled", "stream", "fallback_price", "tier_unknown"].forEach(function (f) {
        if (e[f]) { flags.appendChild(text("span", f.replace(/_/g, " "), "flag")); }
      });
      if (e.endpoint === "reserve") { flags.appendChild(text("span", "reserve", "flag")); }
    });
    ledgerCursor = page.next_cursor;
    $("ledger-more").hidden = !ledgerCursor;
  }

  function load() {
    status("Loading…");
    return Promise.all([
      getJSON("/v1/usage?period=day"), getJSON("/v1/usage?period=month"), getJSON("/v1/usage?period=total"),
      getJSON("/v1/usage/daily?days=90"), getJSON("/v1/usage/ledger?limit=50")
    ]).then(function (r) {
      usage = { day: r[0], month: r[1], total: r[2] };
      $("signin-section").hidden = true;
      $("dashboard").hidden = false;
      $("signout").hidden = false;
      showSummary();
      showLimits();
      showByModel();
      showByProject();
      showChart(r[3]);
      showLedger(r[4], false);
      status("Updated " + new Date().toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") + ".");
      document.body.dataset.loaded = "true";
    }).catch(function (err) {
      if (err.message !== "unauthenticated") { status("Could not load: " + err.message); }
    });
  }

  // The chart follows the width of its box (a phone turned, a window
  // resized).
  window.addEventListener("resize", function () {
    if (chart) { chart.setSize({ width: Math.max(280, $("chart").clientWidth), height: 300 }); }
  });
  $("signin").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var v = $("token").value.trim();
    $("token").value = "";
    if (!v) { return; }
    sessionStorage.setItem(KEY, v);
    $("signin-error").textContent = "";
    load();
  });
  $("signout").addEventListener("click", function () {
    if (!me) { signedOut(""); return; }
    // The session ends at the gateway, then at the provider when it
    // offers RP-initiated logout.
    var headers = {};
    headers["X-CSRF-Token"] = me.csrf;
    fetch("/console/sso/logout", { method: "POST", headers: headers, credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (b) { signedOut(""); window.location.assign(b.location || "/console/"); })
      .catch(function () { signedOut(""); });
  });
  $("period").addEventListener("change", function () { showByModel(); showByProject(); });
  $("ledger-more").addEventListener("click", function () {
    getJSON("/v1/usage/ledger?limit=50&cursor=" + encodeURIComponent(ledgerCursor)).then(function (p) { showLedger(p, true); })
      .catch(function (err) { if (err.message !== "unauthenticated") { status("Could not load: " + err.message); } });
  });
  $("csv-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var month = $("csv-month").value;
    if (!/^\d{4}-\d{2}$/.test(month)) { status("Choose a month."); return; }
    get("/v1/usage/ledger.csv?month=" + month).then(function (r) { return r.blob(); }).then(function (blob) {
      // The file is fetched with the bearer header and saved from memory:
      // the credential never goes into a URL.
      var a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = "ledger-" + month + ".csv";
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(function () { URL.revokeObjectURL(a.href); }, 10000);
      status("Downloaded the ledger of " + month + ".");
    }).catch(function (err) { if (err.message !== "unauthenticated") { status("Could not download: " + err.message); } });
  });

  var now = new Date();
  $("csv-month").value = now.getUTCFullYear() + "-" + String(now.getUTCMonth() + 1).padStart(2, "0");
  if (credential()) { load(); return; }
  if (document.body.dataset.sso !== "on") { $("token").focus(); return; }
  // A single sign-on session, if there is one.
  fetch("/console/api/me", { credentials: "same-origin", cache: "no-store" }).then(function (resp) {
    return resp.ok ? resp.json() : null;
  }).then(function (m) {
    if (!m || !m.signed_in) { $("sso").hidden = false; $("token").focus(); return; }
    me = m;
    $("who").textContent = m.actor + " (" + m.roles.join(", ") + ")";
    $("who").hidden = false;
    $("keys-link").hidden = !m.keys_page;
    load();
  }).catch(function () { $("token").focus(); });
})();
