// Sort and filter the tables kvlib.tables.table emitted: click a header to sort
// (numbers by value, text alphabetically; click again to reverse), type in the box or pick a
// value in a drop-down to filter rows. No kernel, no network; without JS the table is static.
(function () {
  "use strict";

  function rows(table) { return Array.prototype.slice.call(table.tBodies[0].rows); }

  function cell(row, column) {
    return row.querySelector('td[data-column="' + CSS.escape(column) + '"]');
  }

  function compare(a, b) {
    var x = parseFloat(a), y = parseFloat(b);
    var xNum = a !== "" && isFinite(x), yNum = b !== "" && isFinite(y);
    if (a === "" || b === "") { return a === b ? 0 : (a === "" ? 1 : -1); }
    if (xNum && yNum) { return x - y; }
    return a.localeCompare(b);
  }

  function sortBy(table, th) {
    var column = th.dataset.column;
    var descending = th.dataset.order === "asc";
    table.querySelectorAll("th").forEach(function (h) { delete h.dataset.order; });
    th.dataset.order = descending ? "desc" : "asc";
    var sorted = rows(table).sort(function (r1, r2) {
      var a = cell(r1, column).dataset.sort, b = cell(r2, column).dataset.sort;
      var c = compare(a, b);
      return descending && a !== "" && b !== "" ? -c : c;
    });
    var body = table.tBodies[0];
    sorted.forEach(function (r) { body.appendChild(r); });
  }

  function applyFilters(table) {
    var id = table.id;
    var search = document.querySelector('.kvlib-table-search[data-table="' + id + '"]');
    var text = search ? search.value.trim().toLowerCase() : "";
    var picks = Array.prototype.slice.call(
      document.querySelectorAll('.kvlib-table-filter[data-table="' + id + '"]'));
    var shown = 0;
    rows(table).forEach(function (r) {
      var ok = !text || r.textContent.toLowerCase().indexOf(text) >= 0;
      picks.forEach(function (p) {
        if (ok && p.value && cell(r, p.dataset.column).textContent !== p.value) { ok = false; }
      });
      r.hidden = !ok;
      if (ok) { shown += 1; }
    });
    var count = document.querySelector('.kvlib-table-count[data-table="' + id + '"]');
    if (count) { count.textContent = shown + " of " + rows(table).length + " rows"; }
  }

  function wire() {
    document.querySelectorAll("table.kvlib-table").forEach(function (table) {
      if (table.dataset.wired) { return; }
      table.dataset.wired = "yes";
      table.querySelectorAll("th[data-column]").forEach(function (th) {
        th.style.cursor = "pointer";
        th.addEventListener("click", function () { sortBy(table, th); });
      });
      var controls = document.querySelectorAll(
        '.kvlib-table-search[data-table="' + table.id + '"], .kvlib-table-filter[data-table="' + table.id + '"]');
      controls.forEach(function (c) {
        c.addEventListener("input", function () { applyFilters(table); });
        c.addEventListener("change", function () { applyFilters(table); });
      });
    });
    window.kvlibTablesWired = document.querySelectorAll("table.kvlib-table[data-wired]").length;
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", wire);
  } else {
    wire();
  }
})();
