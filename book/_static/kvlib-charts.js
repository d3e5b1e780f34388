// Render every chart the kvlib Altair renderer emitted, with the local Vega bundle
// (book/_ext/offline_assets.py writes it into _static/vendor at build time). Errors are
// collected in window.kvlibChartErrors so the browser test can read them.
//
// A chart built by kvlib.charts.responsive carries a phone layout in usermeta.kvlib_narrow
// (without the datasets both layouts share): when the book-column layout is wider than its
// container, the phone layout is drawn instead, and the choice is made again on resize.
window.kvlibChartErrors = [];
window.kvlibChartsRendered = 0;

function kvlibEmbed(target, spec) {
  return window.vegaEmbed(target, spec, { actions: false, renderer: "svg" });
}

function kvlibNarrowSpec(spec) {
  var narrow = spec.usermeta && spec.usermeta.kvlib_narrow;
  if (!narrow) { return null; }
  var datasets = Object.assign({}, spec.datasets || {}, narrow.datasets || {});
  return Object.assign({}, narrow, { datasets: datasets });
}

function kvlibDraw(target, spec) {
  var narrow = kvlibNarrowSpec(spec);
  return kvlibEmbed(target, spec).then(function (result) {
    if (!narrow) { return; }
    var svg = target.querySelector("svg");
    var wideWidth = svg ? svg.getBoundingClientRect().width : 0;
    var showing = "wide";
    function choose() {
      var want = wideWidth > target.clientWidth + 1 ? "narrow" : "wide";
      if (want === showing) { return Promise.resolve(); }
      showing = want;
      result.finalize();
      return kvlibEmbed(target, want === "narrow" ? narrow : spec).then(function (r) {
        result = r;
        target.dataset.layout = want;
      });
    }
    target.dataset.layout = "wide";
    var timer = null;
    window.addEventListener("resize", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        choose().catch(function (err) { window.kvlibChartErrors.push(String(err)); });
      }, 200);
    });
    return choose();
  });
}

function kvlibRenderCharts() {
  document.querySelectorAll("script.kvlib-spec").forEach(function (node) {
    var target = document.getElementById(node.dataset.target);
    if (!target || target.dataset.rendered) { return; }
    target.dataset.rendered = "pending";
    try {
      var spec = JSON.parse(node.textContent);
      kvlibDraw(target, spec)
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
