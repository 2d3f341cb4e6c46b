// The plotly.js traces profscope's pages draw, and nothing else: lib/core (which holds scatter) plus the
// trace modules below. A page that starts drawing another trace type needs it added here and the bundle
// rebuilt with scripts/build_plotly_bundle.sh (tests/browser/test_chart_bundle.py notices a missing one).
var Plotly = require("plotly.js/lib/core");

Plotly.register([
  require("plotly.js/lib/bar"),
  require("plotly.js/lib/pie"),
  require("plotly.js/lib/sunburst"),
  require("plotly.js/lib/icicle"),
  require("plotly.js/lib/waterfall"),
]);

module.exports = Plotly;
