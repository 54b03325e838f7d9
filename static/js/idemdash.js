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
  // A request the server refused before any view (idemdash:refused, sent by
  // receipts.middleware with nothing to swap): its reason beside the form that sent it, and
  // what the form updates marked stale, until the form's next answer replaces them.
  document.addEventListener("idemdash:refused", function (event) {
    var form = event.target.closest ? event.target.closest("form") || event.target : event.target;
    var note = form.nextElementSibling && form.nextElementSibling.dataset.role === "refused"
      ? form.nextElementSibling : document.createElement("p");
    note.className = "alert alert-error";
    note.dataset.role = "refused";
    note.setAttribute("role", "alert");
    note.textContent = event.detail.message;
    form.after(note);
    var target = form.getAttribute("hx-target") && document.querySelector(form.getAttribute("hx-target"));
    if (target) target.classList.add("stale");
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.xhr.status >= 400) return;  // the refusal's own (empty) swap
    var form = event.detail.requestConfig && event.detail.requestConfig.elt;
    var note = form && form.nextElementSibling;
    if (note && note.dataset.role === "refused") note.remove();
  });
  document.addEventListener("DOMContentLoaded", function () { renderCharts(document); });
  document.addEventListener("htmx:afterSettle", function () { renderCharts(document); });
})();
