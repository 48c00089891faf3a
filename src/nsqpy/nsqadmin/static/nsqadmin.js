/* nsqadmin (nsqpy) page script: confirmed actions, live graphs, the counter, table filters.
 * Plain browser JavaScript, no library, nothing loaded from the internet. Pages are rendered
 * on the server; this script only adds what needs a browser: it calls the JSON API for
 * actions, polls /api/history to draw graphs as SVG, and polls /api/counter. */
(function () {
  "use strict";

  var BASE = document.body.getAttribute("data-base") || "";
  var SVG = "http://www.w3.org/2000/svg";
  var FLASH = "nsqadmin.flash";

  function showMessage(kind, text) {
    var box = document.getElementById("messages");
    if (!box || !text) return;
    var div = document.createElement("div");
    div.className = "alert " + kind;
    div.setAttribute("role", "alert");
    div.textContent = text;
    box.appendChild(div);
  }

  function commafy(n) {
    return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  function callApi(method, url, body) {
    var init = { method: method, headers: { "Accept": "application/json" } };
    if (body !== undefined && body !== null) {
      init.headers["Content-Type"] = "application/json";
      init.body = body;
    }
    return fetch(url, init).then(function (resp) {
      return resp.text().then(function (text) {
        var data = {};
        try { data = JSON.parse(text); } catch (e) { data = { message: text }; }
        return { ok: resp.ok, status: resp.status, data: data };
      });
    });
  }

  // After an action the page reloads; a warning to show survives the reload.
  function afterAction(result, next) {
    var msg = (result.data && result.data.message) || "";
    if (!result.ok) {
      var why = (result.data && typeof result.data.detail === "string" && result.data.detail) || "";
      showMessage("error", "Action failed (" + result.status + "): " + (msg || "no reason given") +
        (why ? " \u2014 " + why : ""));
      return;
    }
    try { sessionStorage.setItem(FLASH, msg ? msg : "OK"); } catch (e) { /* private mode */ }
    if (next) { window.location.href = next; } else { window.location.reload(); }
  }

  function flash() {
    var msg = null;
    try { msg = sessionStorage.getItem(FLASH); sessionStorage.removeItem(FLASH); } catch (e) { return; }
    if (msg && msg !== "OK") showMessage("warning", msg);
    else if (msg === "OK") showMessage("success", "Done.");
  }

  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest ? ev.target.closest("button[data-url]") : null;
    if (!btn) return;
    ev.preventDefault();
    if (!window.confirm(btn.getAttribute("data-confirm") || "Are you sure?")) return;
    btn.disabled = true;
    callApi(btn.getAttribute("data-method") || "POST", btn.getAttribute("data-url"),
            btn.getAttribute("data-body"))
      .then(function (r) { btn.disabled = false; afterAction(r, btn.getAttribute("data-after")); })
      .catch(function (e) { btn.disabled = false; showMessage("error", "Action failed: " + e); });
  });

  // Cluster operations with fields (expand, move a replica, create with partitions): the
  // form's fixed data-body plus its named fields, as JSON, to its data-url.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.classList || !form.classList.contains("cluster-action")) return;
    ev.preventDefault();
    var body = {};
    try { body = JSON.parse(form.getAttribute("data-body") || "{}"); } catch (e) { body = {}; }
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!el.name) return;
      if (el.type === "checkbox") { body[el.name] = el.checked; return; }
      var value = String(el.value).trim();
      if (value !== "") body[el.name] = value;
    });
    if (!window.confirm(form.getAttribute("data-confirm") || "Are you sure?")) return;
    var submit = form.querySelector("button[type='submit']");
    if (submit) submit.disabled = true;
    var after = body.topic && form.id === "cluster-create"
      ? BASE + "/topics/" + encodeURIComponent(body.topic) : null;
    callApi("POST", form.getAttribute("data-url"), JSON.stringify(body))
      .then(function (r) { if (submit) submit.disabled = false; afterAction(r, after); })
      .catch(function (e) { if (submit) submit.disabled = false; showMessage("error", "Action failed: " + e); });
  });

  function setupCreateForm() {
    var form = document.getElementById("create");
    if (!form) return;
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var topic = form.elements.topic.value.trim();
      var channel = form.elements.channel.value.trim();
      var what = channel ? "channel " + channel + " of topic " + topic : "topic " + topic;
      if (!window.confirm("Create " + what + "?")) return;
      var body = JSON.stringify(channel ? { topic: topic, channel: channel } : { topic: topic });
      callApi("POST", form.getAttribute("data-url"), body).then(function (r) {
        afterAction(r, BASE + "/topics/" + encodeURIComponent(topic));
      }).catch(function (e) { showMessage("error", "Create failed: " + e); });
    });
  }

  function setupFilters() {
    var inputs = document.querySelectorAll("input.filter[data-filter]");
    Array.prototype.forEach.call(inputs, function (input) {
      input.addEventListener("input", function () {
        var table = document.getElementById(input.getAttribute("data-filter"));
        if (!table) return;
        var needle = input.value.toLowerCase();
        Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
          row.style.display = row.textContent.toLowerCase().indexOf(needle) >= 0 ? "" : "none";
        });
      });
    });
  }

  function formatValue(metric, v) {
    if (v === null || v === undefined) return "";
    return metric === "rate" ? v.toFixed(1) + "/s" : commafy(v);
  }

  function drawGraph(fig, doc) {
    var metric = fig.getAttribute("data-metric") || "rate";
    var svg = fig.querySelector("svg");
    var times = doc.timestamps || [];
    var values = doc[metric] || [];
    var pts = [];
    for (var i = 0; i < values.length; i++) {
      if (values[i] !== null && values[i] !== undefined) pts.push([times[i], values[i]]);
    }
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    fig.setAttribute("data-points", String(pts.length));
    var last = fig.querySelector(".last");
    if (!pts.length) {
      fig.setAttribute("data-last", "");
      if (last) last.textContent = "(no samples yet)";
      return;
    }
    var max = 0;
    pts.forEach(function (p) { if (p[1] > max) max = p[1]; });
    var lastValue = pts[pts.length - 1][1];
    fig.setAttribute("data-last", String(lastValue));
    fig.setAttribute("data-max", String(max));
    if (last) last.textContent = formatValue(metric, lastValue) + " (max " + formatValue(metric, max) + ")";
    if (window.uPlot) plotChart(fig, metric, pts);
    else drawLine(svg, pts, max);
  }

  /* uPlot (the npm package make copies into static/) draws the series on a canvas; one chart
   * per figure, fed new data on each poll. */
  function plotChart(fig, metric, pts) {
    var data = [pts.map(function (p) { return p[0]; }), pts.map(function (p) { return p[1]; })];
    if (fig.nsqPlot) {
      fig.nsqPlot.setData(data);
      return;
    }
    var svg = fig.querySelector("svg");
    if (svg) svg.style.display = "none";
    var holder = document.createElement("div");
    holder.className = "plot";
    fig.appendChild(holder);
    fig.nsqPlot = new window.uPlot({
      width: 300,
      height: 110,
      legend: { show: false },
      cursor: { show: false },
      scales: { x: { time: true } },
      axes: [{ size: 24, font: "10px sans-serif" },
             { size: 44, font: "10px sans-serif",
               values: function (u, vals) { return vals.map(function (v) { return formatValue(metric, v); }); } }],
      series: [{}, { label: metric, stroke: "#1d5fa8", width: 1.5, fill: "rgba(29,95,168,0.08)" }]
    }, data, holder);
    fig.setAttribute("data-renderer", "uplot");
  }

  /* Without uPlot (its files not installed): a plain SVG polyline. */
  function drawLine(svg, pts, max) {
    var t0 = pts[0][0], t1 = pts[pts.length - 1][0];
    var scale = max > 0 ? max : 1;
    var coords = pts.map(function (p, i) {
      var x = t1 > t0 ? (p[0] - t0) / (t1 - t0) * 300 : (pts.length > 1 ? i / (pts.length - 1) * 300 : 150);
      var y = 78 - (p[1] / scale) * 72;
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    var base = document.createElementNS(SVG, "line");
    base.setAttribute("x1", "0"); base.setAttribute("x2", "300");
    base.setAttribute("y1", "78"); base.setAttribute("y2", "78");
    base.setAttribute("class", "axis");
    svg.appendChild(base);
    var line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", coords.join(" "));
    line.setAttribute("class", "series");
    svg.appendChild(line);
  }

  function setupGraphs() {
    var figs = document.querySelectorAll("figure.graph[data-history]");
    Array.prototype.forEach.call(figs, function (fig) {
      var url = fig.getAttribute("data-history");
      var load = function () {
        fetch(url, { headers: { "Accept": "application/json" } })
          .then(function (r) { return r.json(); })
          .then(function (doc) { drawGraph(fig, doc); })
          .catch(function () { fig.setAttribute("data-error", "1"); });
      };
      load();
      var every = parseInt(fig.getAttribute("data-refresh") || "0", 10);
      if (every > 0) window.setInterval(load, every);
    });
  }

  function setupCounter() {
    var box = document.getElementById("counter");
    if (!box) return;
    var countEl = box.querySelector(".count");
    var rateEl = box.querySelector(".rate");
    var shown = parseInt(countEl.textContent.replace(/,/g, ""), 10) || 0;
    var prev = null;
    var animate = function (from, to) {
      var start = null;
      var step = function (ts) {
        if (start === null) start = ts;
        var f = Math.min(1, (ts - start) / 800);
        countEl.textContent = commafy(from + (to - from) * f);
        if (f < 1) window.requestAnimationFrame(step);
      };
      window.requestAnimationFrame(step);
    };
    var poll = function () {
      callApi("GET", box.getAttribute("data-url")).then(function (r) {
        if (!r.ok) { box.setAttribute("data-error", r.data.message || String(r.status)); return; }
        box.removeAttribute("data-error");
        var total = 0;
        var stats = r.data.stats || {};
        Object.keys(stats).forEach(function (k) { total += stats[k].message_count || 0; });
        var now = Date.now();
        if (prev && now > prev.t && total >= prev.total) {
          rateEl.textContent = " (" + ((total - prev.total) * 1000 / (now - prev.t)).toFixed(1) + " msgs/s)";
        }
        prev = { t: now, total: total };
        box.setAttribute("data-total", String(total));
        if (total !== shown) { animate(shown, total); shown = total; }
      }).catch(function () { box.setAttribute("data-error", "unreachable"); });
    };
    poll();
    window.setInterval(poll, 1000);
  }

  function setupGraphiteRates() {
    var cells = document.querySelectorAll("[data-graphite-target]");
    Array.prototype.forEach.call(cells, function (cell) {
      var url = BASE + "/api/graphite?metric=rate&target=" +
        encodeURIComponent(cell.getAttribute("data-graphite-target"));
      callApi("GET", url).then(function (r) {
        cell.textContent = r.ok ? r.data.rate : "N/A";
      });
    });
  }

  flash();
  setupCreateForm();
  setupFilters();
  setupGraphs();
  setupCounter();
  setupGraphiteRates();
  document.body.setAttribute("data-ready", "1");
})();
