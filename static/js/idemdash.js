// Draws every Plotly chart on the page from the JSON that the server put beside it, and
// again for charts that htmx swaps in (window change, polling); holds a poll while what it
// waits for is on the page. No build step.
(function () {
  function renderCharts(root) {
    if (!window.Plotly) return;
    root.querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.rendered) return;
      var source = document.getElementById(el.dataset.chart);
      if (!source) return;
      var figure = JSON.parse(source.textContent);
      el.dataset.rendered = "1";
      Plotly.react(el, figure.data, figure.layout, { displayModeBar: false, responsive: true });
    });
  }
  // A poll (a request with no triggering event) is skipped while what its
  // data-poll-waits-while names is on the page: a chart under the pointer on the overview
  // (the swap would wipe the hover box), an open confirmation on a detail page (the swap
  // would wipe the form). Here rather than as an hx-trigger filter, which htmx runs as code,
  // and the Content-Security-Policy refuses that.
  document.addEventListener("htmx:confirm", function (event) {
    var waitsWhile = event.target.getAttribute && event.target.getAttribute("data-poll-waits-while");
    if (waitsWhile && !event.detail.triggeringEvent && document.querySelector(waitsWhile)) {
      event.preventDefault();
    }
  });
  document.addEventListener("DOMContentLoaded", function () { renderCharts(document); });
  document.addEventListener("htmx:afterSettle", function () { renderCharts(document); });
})();
