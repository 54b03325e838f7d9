// Draws every Plotly chart on the page from the JSON that the server put beside it, and
// again for charts that htmx swaps in (window change, polling). No build step.
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
  document.addEventListener("DOMContentLoaded", function () { renderCharts(document); });
  document.addEventListener("htmx:afterSettle", function () { renderCharts(document); });
})();
