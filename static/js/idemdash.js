// Draws every Plotly chart on the page from the JSON that the server put beside it, and
// again for charts that htmx swaps in (window change, polling); holds the overview's poll
// while a chart is hovered. No build step.
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
  // A poll waits while the pointer is on what data-poll-waits-while-hovered names (the
  // overview's charts: the swap would wipe the hover box). Here rather than as an hx-trigger
  // filter, which htmx runs as code, and the Content-Security-Policy refuses that.
  document.addEventListener("htmx:confirm", function (event) {
    var hovered = event.target.getAttribute && event.target.getAttribute("data-poll-waits-while-hovered");
    if (hovered && !event.detail.triggeringEvent && document.querySelector(hovered + ":hover")) {
      event.preventDefault();
    }
  });
  document.addEventListener("DOMContentLoaded", function () { renderCharts(document); });
  document.addEventListener("htmx:afterSettle", function () { renderCharts(document); });
})();
