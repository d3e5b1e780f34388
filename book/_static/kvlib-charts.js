// Render every chart the kvlib Altair renderer emitted, with the local Vega bundle
// (book/_ext/offline_assets.py writes it into _static/vendor at build time). Errors are
// collected in window.kvlibChartErrors so the browser test can read them.
window.kvlibChartErrors = [];
window.kvlibChartsRendered = 0;
function kvlibRenderCharts() {
  document.querySelectorAll("script.kvlib-spec").forEach(function (node) {
    var target = document.getElementById(node.dataset.target);
    if (!target || target.dataset.rendered) { return; }
    target.dataset.rendered = "pending";
    try {
      var spec = JSON.parse(node.textContent);
      window.vegaEmbed(target, spec, { actions: false, renderer: "svg" })
        .then(function () { target.dataset.rendered = "yes"; window.kvlibChartsRendered += 1; })
        .catch(function (err) { window.kvlibChartErrors.push(String(err)); });
    } catch (err) {
      window.kvlibChartErrors.push(String(err));
    }
  });
}
if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", kvlibRenderCharts);
} else {
  kvlibRenderCharts();
}
