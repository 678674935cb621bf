//! The page's one stylesheet, inline in `<head>`: the page loads no
//! external asset.

pub(super) const STYLE: &str = "\
*{box-sizing:border-box}\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2329;background:#f6f7f9}\
main{max-width:1320px;margin:0 auto;padding:12px 20px 24px}\
header{display:flex;justify-content:space-between;align-items:baseline;flex-wrap:wrap;gap:4px 16px}\
h1{font-size:22px;margin:0}h1 small,h2 small{font-weight:normal;color:#59636e;font-size:13px}\
h2{font-size:16px;margin:18px 0 6px}\
.verdict{margin:10px 0;padding:8px 12px;border-radius:6px;font-weight:600}\
.verdict.ok{background:#e3f4e6;color:#14532d}.verdict.bad{background:#fde7e7;color:#8a1010}\
.verdict.warn{background:#fff3d6;color:#6b4700}\
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px}\
.card{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:6px 10px;color:inherit;text-decoration:none}\
.card .k{color:#59636e;font-size:12px;text-transform:uppercase;letter-spacing:.04em}\
.card .v{font-size:22px;font-weight:600}.card .d{font-size:12px;color:#59636e}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:8px;margin-top:8px}\
.charts figure{margin:0;background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:4px}\
svg.chart{width:100%;height:auto;display:block;font-size:11px}\
svg .ct{font-weight:600;font-size:12px;fill:#1d2329}svg .last{fill:#1d2329}svg .lv{font-weight:600}\
svg .yl,svg .xl{fill:#59636e}svg .axis{stroke:#8c959f}svg .grid{stroke:#d8dde3;stroke-dasharray:3 3}\
svg .line{stroke-width:1.5}svg .nodata{fill:#f1f3f5}svg .empty{fill:#8c959f;font-style:italic}\
.scroll{max-height:360px;overflow:auto;border:1px solid #d8dde3;border-radius:6px;background:#fff}\
table{border-collapse:collapse;width:100%}\
th{position:sticky;top:0;background:#eef1f4;font-weight:600;font-size:12px;color:#3b444d}\
td,th{border-bottom:1px solid #e4e8ec;padding:4px 8px;text-align:left;vertical-align:top}\
td span[title]{white-space:nowrap;border-bottom:1px dotted #8c959f;cursor:help}\
tr.warn td{background:#fff8e6}tr.bad td{background:#fdf0f0}\
.tag{display:inline-block;padding:0 6px;border-radius:9px;font-size:12px;background:#eef1f4;white-space:nowrap}\
.tag.bad{background:#fbd5d5;color:#8a1010}.tag.ok{background:#d3f0da;color:#14532d}\
.tag.warn{background:#ffe8ad;color:#6b4700}\
.bad{color:#b00}.ok{color:#14732d}.muted{color:#6e7781}\
.two{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:0 16px}\
footer{margin-top:16px;font-size:13px}";
