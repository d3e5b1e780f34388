// The landing page's calculator (kvlib.calculator.calculator). kvlib computed every case when
// the book was built (kvlib.answer.calculator_data); this script unpacks that table, draws the
// controls, looks the reader's case up and multiplies its dollars (kept at $1 per GPU-hour)
// by the price. It computes nothing else. Errors go to window.kvlibCalculatorErrors, and
// window.kvlibCalculatorsReady counts calculators drawn (the browser test reads both).
(function () {
  "use strict";
  window.kvlibCalculatorErrors = [];
  window.kvlibCalculatorsReady = 0;

  function unpack(b64) {
    var bytes = Uint8Array.from(atob(b64), function (c) { return c.charCodeAt(0); });
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(JSON.parse);
  }

  // Three significant digits with thousands separators, whole numbers from 1,000 up (as the
  // page's text writes them): 1,214 · 23.7 · 0.667 · 0.0190.
  function sig3(x) {
    if (x === 0) { return "0"; }
    if (Math.abs(x) >= 999.5) { return Math.round(x).toLocaleString("en-US"); }
    var v = Number(x.toPrecision(3));
    var d = Math.max(0, 2 - Math.floor(Math.log10(Math.abs(v))));
    return v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
  }
  function count(x) { return x.toLocaleString("en-US"); }
  function money(x) { return "$" + sig3(x); }
  function seconds(x) { return sig3(x) + " s"; }
  function tokens(n) { return count(n); }
  // A signed percentage with a true minus sign: −88%, +29%.
  function pct(x) { var v = Math.round(x * 100); return (v < 0 ? "\u2212" : "+") + Math.abs(v) + "%"; }
  function plural(n, word) { return count(n) + " " + word + (n === 1 ? "" : "s"); }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function select(name, label, options) {
    var wrap = el("label", { "class": "kc-control" });
    wrap.appendChild(el("span", { "class": "kc-name" }, label));
    var s = el("select", { name: name });
    options.forEach(function (o) { s.appendChild(el("option", { value: String(o[0]) }, o[1])); });
    wrap.appendChild(s);
    return [wrap, s];
  }

  function build(root, data) {
    var cols = {};
    data.cols.forEach(function (c, i) { cols[c] = i; });
    // every GPU count a case runs on, fewest first (the first is the grid's own answer); a
    // case is its engine, model, weights, KV dtype, memory fraction, GPU, max_model_len,
    // prompt and output (the fraction an index into its engine's settings)
    var N = cols.n_gpus;
    var rows = new Map();
    data.rows.forEach(function (r) {
      var k = r.slice(0, N).join("|");
      if (!rows.has(k)) { rows.set(k, []); }
      rows.get(k).push(r);
    });
    rows.forEach(function (list) { list.sort(function (a, b) { return a[N] - b[N]; }); });
    var slo = data.slo;
    var d = data["default"];
    var state = {
      engine: data.engines.findIndex(function (e) { return e.slug === d.engine; }),
      model: data.models.findIndex(function (m) { return m.slug === d.model; }),
      gpu: data.gpus.findIndex(function (g) { return g.slug === d.gpu; }),
      price: null, custom: false, n: null
    };

    root.textContent = "";
    var controls = el("div", { "class": "kc-controls" });
    root.appendChild(controls);
    function add(name, label, options) {
      var pair = select(name, label, options);
      controls.appendChild(pair[0]);
      return pair[1];
    }
    var sEngine = add("engine", "Engine", data.engines.map(function (e, i) { return [i, e.name]; }));
    var sModel = add("model", "Model", data.models.map(function (m, i) { return [i, m.name]; }));
    var sWeights = add("weights", "Weights", []);
    var sKv = add("kv_dtype", "KV cache", data.kv_dtypes.map(function (k, i) { return [i, k]; }));
    var sGpu = add("gpu", "GPU", data.gpus.map(function (g, i) { return [i, g.name]; }));
    var sUtil = add("utilization", "memory fraction", []);
    var utilName = sUtil.parentNode.querySelector(".kc-name");
    var sLen = add("max_model_len", "Max model length", []);
    var sPrompt = add("prompt", "Prompt tokens",
                      data.prompts.map(function (p, i) { return [i, tokens(p)]; }));
    var sOutput = add("output", "Output tokens",
                      data.outputs.map(function (o, i) { return [i, tokens(o)]; }));
    var sTp = add("n_gpus", "GPUs per replica", []);
    var sKind = add("kind", "Price", []);
    var priceWrap = el("label", { "class": "kc-control kc-price-control" });
    priceWrap.appendChild(el("span", { "class": "kc-name" }, "$ per GPU-hour"));
    var sPrice = el("input", { type: "range", name: "price", min: "0.25", max: "15", step: "0.01" });
    var priceShown = el("output", { "class": "kc-price-value" });
    priceWrap.appendChild(sPrice);
    priceWrap.appendChild(priceShown);
    controls.appendChild(priceWrap);
    var sTtft = null, sSpeed = null, sDuty = null, sPeak = null;
    if (slo) {
      sTtft = add("slo_ttft", "p" + slo.ttft_percentile + " time to first token within",
                  slo.ttfts.map(function (t, i) { return [i, sig3(t) + " s"]; }));
      sSpeed = add("slo_speed", "tokens/s per user (median) at least",
                   slo.speeds.map(function (t, i) { return [i, sig3(t)]; }));
      var peakWrap = el("label", { "class": "kc-control" });
      peakWrap.appendChild(el("span", { "class": "kc-name" }, "peak requests/s"));
      sPeak = el("input", { type: "number", name: "peak_rps", min: "0.01", step: "any",
                            value: String(d.peak_rps) });
      peakWrap.appendChild(sPeak);
      controls.appendChild(peakWrap);
      sDuty = add("duty", "share of the day at peak", slo.duty_cycles.map(function (f, i) {
        return [i, Math.round(f * 100) + "% (" + sig3(24 * f) + " h)"];
      }));
      sTtft.value = String(slo.ttfts.indexOf(d.slo_ttft_s));
      sSpeed.value = String(slo.speeds.indexOf(d.slo_speed));
      sDuty.value = String(slo.duty_cycles.indexOf(d.duty_cycle));
    }

    var card = el("div", { "class": "kc-card", "aria-live": "polite" });
    root.appendChild(card);

    function setOptions(s, options, keep) {
      s.textContent = "";
      options.forEach(function (o) { s.appendChild(el("option", { value: String(o[0]) }, o[1])); });
      var values = options.map(function (o) { return String(o[0]); });
      s.value = values.indexOf(String(keep)) >= 0 ? String(keep) : values[values.length - 1];
    }

    function modelChanged(first) {
      var m = data.models[state.model];
      var keepW = first ? m.weights.findIndex(function (w) { return w.label === d.weights; })
                        : Number(sWeights.value);
      setOptions(sWeights, m.weights.map(function (w, i) {
        return [i, w.label + (w.published ? " (as published)" : "")];
      }), Math.max(0, Math.min(keepW, m.weights.length - 1)));
      var keepL = first ? d.max_model_len : Number(sLen.value);
      setOptions(sLen, m.lengths.map(function (n) {
        return [n, tokens(n) + (n === m.max_model_len ? " (the model's maximum)" : "")];
      }), m.lengths.indexOf(keepL) >= 0 ? keepL : m.lengths[0]);
    }

    // The memory-fraction menu is the engine's own flag: vLLM's utilizations, the other
    // engines at their default (chosen per GPU and GPU count: the figures say which).
    function engineChanged(first) {
      var e = data.engines[state.engine];
      utilName.textContent = e.flag;
      var keep = first ? e.settings.indexOf(d.gpu_memory_utilization) : Number(sUtil.value);
      setOptions(sUtil, e.settings.map(function (u, i) {
        return [i, u === null ? e.name + "'s default" : u.toFixed(2)];
      }), Math.max(0, Math.min(keep, e.settings.length - 1)));
      sUtil.disabled = e.settings.length < 2;
    }

    function kindsOf(g) { return data.kinds.filter(function (k) { return g.prices[k]; }); }

    function gpuChanged(first) {
      var g = data.gpus[state.gpu];
      var kinds = kindsOf(g);
      var keep = first ? d.kind : sKind.value;
      if (kinds.length === 0) {
        setOptions(sKind, [["", "no offer on file"]], "");
        sKind.disabled = true;
      } else {
        sKind.disabled = false;
        setOptions(sKind, kinds.map(function (k) { return [k, k]; }),
                   kinds.indexOf(keep) >= 0 ? keep : kinds[0]);
      }
      priceFromKind();
    }

    // The kind's market price, unless the reader set one with the slider (kept when the GPU
    // changes; choosing a kind of offer asks for its market price again).
    function priceFromKind(askMarket) {
      var offer = data.gpus[state.gpu].prices[sKind.value];
      if (offer && (askMarket || !state.custom)) { state.price = offer.price; state.custom = false; }
      if (state.price === null) { state.price = 2.0; state.custom = true; }
      sPrice.value = String(state.price);
    }

    // A request longer than max_model_len cannot be sent: such prompt and output options are
    // off, and a selection past it steps down (the output first).
    function lengthsChanged() {
      var limit = Number(sLen.value);
      Array.prototype.forEach.call(sPrompt.options, function (o, i) {
        o.disabled = data.prompts[i] + data.outputs[0] > limit;
      });
      Array.prototype.forEach.call(sOutput.options, function (o, i) {
        o.disabled = data.prompts[0] + data.outputs[i] > limit;
      });
      while (data.prompts[Number(sPrompt.value)] + data.outputs[Number(sOutput.value)] > limit) {
        if (Number(sOutput.value) > 0) { sOutput.value = String(Number(sOutput.value) - 1); }
        else { sPrompt.value = String(Number(sPrompt.value) - 1); }
      }
    }

    function showLaunch(head, command, cls) {
      var box = el("div", { "class": "kc-launch" });
      box.appendChild(sentence("kc-launch-head", head));
      // the command breaks between words only: a phone must not split "--kv-cache-dtype"
      var pre = el("pre", { "class": cls || "kc-launch-command" });
      command.split(" ").forEach(function (word, i) {
        if (i) { pre.appendChild(document.createTextNode(" ")); }
        pre.appendChild(el("span", { "class": "kc-flag" }, word));
      });
      box.appendChild(pre);
      card.appendChild(box);
    }

    // A paragraph whose engine flags stay on one line ("--gpu-memory-utilization 0.9").
    function sentence(cls, text) {
      var p = el("p", { "class": cls });
      text.split(/(--[a-z-]+(?: [0-9.]+)?)/).forEach(function (part, i) {
        p.appendChild(i % 2 ? el("span", { "class": "kc-flag" }, part)
                            : document.createTextNode(part));
      });
      return p;
    }

    function line(cls, text) { var p = sentence(cls, text); card.appendChild(p); return p; }

    // A tile: the model's figure, and under it the range the held-out error band gives
    // (flagged when the whole band lies on one side of the figure).
    function tile(parent, key, value, label, range, side, plain) {
      var t = el("div", { "class": "kc-tile" + (side ? " kc-" + side : ""), "data-kc": key });
      t.appendChild(el("span", { "class": "kc-value" }, value));
      t.appendChild(el("span", { "class": "kc-label" }, label));
      if (range) {  // an error band, or (plain) a note in words
        t.appendChild(el("span", { "class": "kc-range" },
                         plain ? range : (side ? side + "; band " : "error band ") + range));
      }
      parent.appendChild(t);
    }

    function render() {
      var m = data.models[state.model], g = data.gpus[state.gpu];
      var w = m.weights[Number(sWeights.value)];
      var e = data.engines[state.engine];
      var key = [state.engine, state.model, Number(sWeights.value), Number(sKv.value),
                 Number(sUtil.value), state.gpu, Number(sLen.value), Number(sPrompt.value),
                 Number(sOutput.value)];
      var options = rows.get(key.join("|")) || [];
      var counts = options.map(function (o) { return o[N]; });
      setOptions(sTp, counts.map(function (c, i) {
        return [c, c === 0 ? "none fits" : c + (i === 0 ? " (the fewest that fit)" : "")];
      }), counts.indexOf(state.n) >= 0 ? state.n : counts[0]);
      sTp.disabled = counts.length < 2;
      var r = options[Math.max(0, counts.indexOf(Number(sTp.value)))];
      var price = state.price;
      priceShown.textContent = "$" + price.toFixed(2);
      card.textContent = "";
      var prompt = data.prompts[key[7]], output = data.outputs[key[8]];
      var setting = e.settings[key[4]];
      if (setting === null) { sUtil.options[0].textContent = e.name + "'s default"; }
      line("kc-setup", e.name + " · " + m.name + " · " + w.label + " weights (" + w.repository +
           ") · KV cache " + data.kv_dtypes[key[3]] + " · " + g.name + " · max model length " +
           tokens(key[6]) + " · requests of " + tokens(prompt) + " prompt + " + tokens(output) +
           " output tokens");
      if (!r) {
        line("kc-none", "This combination is not in the precomputed table.");
        return;
      }
      var n = r[N];
      if (n === 0) {
        var why = data.texts[r[N + 2]], fit = data.texts[r[N + 3]];
        var limitWord = {weights: "weights", activation: "weights + activation peak",
                         kv: "KV cache", tp: "GPU count", format: "not modelled",
                         engine: "engine"}[r[N + 1]];
        var wide = r.length > N + 4;  // two nodes of eight hold it
        line("kc-nofit", (wide ? "Not on one node of up to eight GPUs (" : "Does not fit (") +
             limitWord + "): " + why + ".");
        if (fit) { line("kc-wouldfit", fit.charAt(0).toUpperCase() + fit.slice(1) + "."); }
        if (wide) {
          line("kc-wide", data.texts[r[N + 4]] + "; " + money(r[N + 5] * price) + " per 1M " +
               "output tokens at this price, at that speed (so a lower bound).");
          showLaunch("The command that starts it on two nodes (on the head node of a Ray " +
                     "cluster of both, as vLLM's multi-node guide sets one up):",
                     data.texts[r[N + 6]]);
        }
        dataParallel(key, price);
        return;
      }
      var v = function (c) { return r[cols[c]]; };
      var band = data.bands[v("band")], side = band[5];
      var beyond = v("batch") > data.batch_limit;
      // the band scales speeds by (1 + low) … (1 + high) and costs by the inverse
      var lo = 1 + band[3], hi = 1 + band[4];
      var tiles = el("div", { "class": "kc-tiles" });
      card.appendChild(tiles);
      tile(tiles, "gpus", count(n), n > 1 ? "GPUs (tensor parallel)" : "GPU");
      // what the pool holds, and, where fewer run at once (the engine's cap on running requests
      // or its step's token budget: SGLang runs a hybrid's requests on a third of its state
      // slots), how many do
      var held = Math.floor(v("max_concurrency"));
      tile(tiles, "requests", v("max_concurrency") < 100 ? v("max_concurrency").toFixed(1)
                                                          : count(held),
           "requests the KV pool holds",
           v("batch") < held ? count(v("batch")) + " run at once, as the engine is started" : "",
           "", true);
      tile(tiles, "tps", sig3(v("tokens_per_s")), "output tokens/s in all",
           sig3(v("tokens_per_s_low")) + "–" + sig3(v("tokens_per_s_high")), side);
      tile(tiles, "user", sig3(v("per_user_tokens_per_s")), "tokens/s per user",
           sig3(v("per_user_tokens_per_s") * lo) + "–" + sig3(v("per_user_tokens_per_s") * hi),
           side);
      // measured runs like this one (the TTFT band of its batch) took 1 ÷ (1 + median error)
      // times the model's figure: said beside it, so the floor is not read as the answer
      var tb = v("ttft_band") >= 0 ? data.ttft_bands[v("ttft_band")] : null;
      tile(tiles, "ttft", seconds(v("ttft_s")), "to the first token: a lower bound",
           tb && tb[2] !== null && tb[2] > -1
             ? "runs measured like this took about " + seconds(v("ttft_s") / (1 + tb[2])) +
               " (the median miss applied)"
             : "", "", true);
      // two ways to bill the same GPU time, each named: all of it to the output tokens, or
      // split between prompts and output (then the output's share is lower)
      tile(tiles, "output", money(v("output_cost") * price),
           "per 1M output tokens, the GPU's whole time",
           money(v("output_cost") * price / hi) + "–" + money(v("output_cost") * price / lo),
           side);
      tile(tiles, "input", money(v("input_cost") * price), "per 1M input tokens",
           v("batch") === 1 ? "its own prompt, prefilled alone"
                            : "if prompts pay their share: output then " +
                              money(v("output_cost_split") * price),
           "", true);
      frontier(options, price, n);
      var batch = v("batch");
      line("kc-batch", batch === 1
        ? "1 request at a time: its prompt is prefilled alone before it decodes, so input " +
          "tokens cost " + money(v("input_cost") * price) + " per 1M and output tokens " +
          money(v("output_cost") * price) + " per 1M, a request paying both."
        : count(batch) + " requests decoded together. Splitting the GPU time by the work it " +
          "does, prompts cost " + money(v("input_cost") * price) + " and output " +
          money(v("output_cost_split") * price) + " per 1M tokens; charging all of it to " +
          "the output, " + money(v("output_cost") * price) + ".");
      line("kc-band", "Speed model's error, " + band[6] + ". Eight in ten of those " +
           "measurements lay between " + pct(band[3]) + " and " + pct(band[4]) + " of its " +
           "figure (10th–90th percentile), so " +
           sig3(v("tokens_per_s_low")) + "–" + sig3(v("tokens_per_s_high")) + " tokens/s and " +
           money(v("output_cost") * price / hi) + "–" + money(v("output_cost") * price / lo) +
           " per 1M output tokens." +
           (beyond ? " No measurement has " + count(v("batch")) + " requests in flight (the " +
            "largest batch with a band of its own is " + count(data.batch_limit) + "): the band " +
            "shown is that of the largest measured batches, and the figures are an " +
            "extrapolation." : "") +
           (side === "optimistic" ? " At least nine in ten measured cases like this ran " +
            "slower than the model: read its figures as optimistic and plan on the range." :
            side === "pessimistic" ? " At least nine in ten measured cases like this ran " +
            "faster than the model: its figures are pessimistic." : ""));
      line("kc-ttft", "Time to the first token assumes requests arrive spread out, with no " +
           "queue: a lower bound. " + (tb
             ? "Against " + plural(tb[1], "measured run") + " with " + (tb[0] === "1" ?
               "one request" : tb[0] + " requests") + " in flight, the model's TTFT was off " +
               "by a median " + pct(tb[2]) + (tb[3] === null ? " (too few runs for a spread)."
               : " (10th–90th percentile " + pct(tb[3]) + " to " + pct(tb[4]) + ").")
             : "No run with this many requests in flight was measured."));
      var pre = line("kc-prefix", (batch === 1 ? "That is the price of each " +
                     tokens(prompt) + "-token prompt prefilled alone" : "Under steady load, " +
                     "as the tiles assume, budget with the input price above; prefilling each " +
                     tokens(prompt) + "-token prompt alone, as at low load, input tokens cost " +
                     money(v("prefix_cold") * price) + " per 1M") + "; with a " +
                     Math.round(data.hit_rate * 100) + "% prefix hit rate, " +
                     money(v("prefix_cached") * price) +
                     // a short prompt of a large model is prefilled at the pace of its weight
                     // reads: a cached prefix saves math, not those reads (and adds its own KV)
                     (v("prefix_cached") >= v("prefix_cold") ? ", no less: a prompt this short " +
                      "is prefilled at the pace of the weight reads, which a cached prefix does " +
                      "not shorten" : "") + " (the method of ");
      var a = el("a", { href: "07_prefix_caching.html" }, "chapter 7");
      pre.appendChild(a);
      pre.appendChild(document.createTextNode(", at this page's price)."));
      var offer = g.prices[sKind.value];
      line("kc-price", state.custom || !offer ? "Your price: $" + price.toFixed(2) +
           " per GPU-hour" + (offer ? " (the " + sKind.value + " offers on file: " +
           offer.basis + ")" : " (data/prices.csv has no offer for this GPU)") + "."
           : "$" + price.toFixed(2) + " per GPU-hour: " + offer.basis +
             " in data/prices.csv — " + offer.rows + ".");
      if (setting === null) {  // the engine's own default: its value for this case
        sUtil.options[0].textContent = e.name + "'s default (" + v("memory_fraction") + ")";
      }
      if (data.texts[v("launch")]) {
        showLaunch("The command that starts " + e.name + " with this pool, every default the " +
          "figures assume spelled out (" + e.flag + " " + v("memory_fraction") +
          (setting === null ? ", " + e.name + "'s default here" : "") + ": the share " +
          e.share + "):", data.texts[v("launch")]);
      } else {
        line("kc-launch-none", "No command: this model's record names no Hugging Face " +
             "repository to load.");
      }
      speculation(m, key, n, price);
      dataParallel(key, price);
      if (slo) { latency(key, n, prompt, output, price); }
    }

    // A mixture of experts with MLA on one node of eight as eight data-parallel ranks with
    // expert parallelism (precomputed), with how far the step law ran from published points.
    function dataParallel(key, price) {
      var dp = data.data_parallel;
      var c = dp && dp.cases[key.join("|")];
      if (!c) { return; }
      var err = dp.error;
      line("kc-dp", data.texts[c[0]] + "; " + money(c[1] * price) + " per 1M output tokens at " +
           "this price, at that speed." + (err && err.n ? " Read the speed as a ceiling: on " +
           plural(err.n, "published point") + " with data-parallel attention, the step law's " +
           "time per token was a median " + Math.round(-err.median * 100) + "% shorter than " +
           "measured." : ""));
      showLaunch("The command that starts it as eight data-parallel ranks:", data.texts[c[2]],
                 "kc-dp-command");
    }

    // Speculative decoding with the model's measured draft chain (precomputed at the case's
    // batch), or why this case has none.
    function speculation(m, key, n, price) {
      var sp = data.speculative;
      if (!sp) { return; }
      var src = sp.sources[m.slug];
      if (!src) {
        line("kc-spec", "Speculative decoding: no measured acceptance rate for this model " +
             "in data/speculative.csv, so none is priced.");
        return;
      }
      var c = sp.cases[key.join("|") + "|" + n];
      if (!c) { return; }
      var p = line("kc-spec", "With " + src.name + " (k = " + src.k + ", " + src.stated +
                   " measured" + (src.engine ? " in " + src.engine : "") +
                   (src.dataset ? " on " + src.dataset : "") + ": ");
      p.appendChild(el("a", { href: src.url }, src.source));
      if (src.speedup) {
        p.appendChild(document.createTextNode("; \u00d7" + src.speedup.toFixed(2) + " measured" +
                                              (src.batch ? " at batch " + src.batch : "")));
      }
      if (c.length === 1) {
        p.appendChild(document.createTextNode(") this case is not priced: " + data.texts[c[0]] +
                                              "."));
        return;
      }
      var err = sp.error;
      p.appendChild(document.createTextNode("): " + sig3(c[1]) + " tokens/s per user against " +
        sig3(c[2]) + " without, " + money(c[4] * price) + " per 1M output tokens against " +
        money(c[5] * price) + " (\u00d7" + c[3].toFixed(2) + "; decode steps only, " +
        plural(c[0], "request") + " decoded together, where the tiles above count prompts " +
        "too). The draft's weights and KV leave the " +
        "pool " + count(c[6]) + " tokens instead of " + count(c[7]) + "." +
        (err && err.n ? " Read it as an upper bound: against " + plural(err.n, "measured " +
          "speed-up") + " at batch 1, the model's ran a median " + Math.round(err.median * 100) +
          "% too high (" : "")));
      if (err && err.n) {
        p.appendChild(el("a", { href: "05_latency.html" }, "chapter 5"));
        p.appendChild(document.createTextNode(")."));
      }
      showLaunch("The command that starts it with speculative decoding:", data.texts[c[8]],
                 "kc-spec-command");
    }

    // The latency target: requests/s one replica sustains within it (precomputed: the lower
    // of the TTFT bound's and the speed bound's rate), and the fleet a peak rate needs.
    function latency(key, n, prompt, output, price) {
      var box = el("div", { "class": "kc-slo" });
      card.appendChild(box);
      var ti = Number(sTtft.value), si = Number(sSpeed.value);
      box.appendChild(el("p", { "class": "kc-slo-head" }, "At a latency target: p" +
        slo.ttft_percentile + " time to first token within " + sig3(slo.ttfts[ti]) + " s and " +
        sig3(slo.speeds[si]) + " tokens/s per user (median)."));
      var c = slo.cases[key.join("|") + "|" + n];
      if (!c) {
        box.appendChild(el("p", { "class": "kc-slo-none" }, "Latency targets were simulated " +
          "for fewer cases than the memory figures above (each takes seconds to simulate): " +
          slo.covered + "."));
        return;
      }
      var byT = c[1 + ti], byS = c[1 + slo.ttfts.length + si];
      var hit = byS[0] < byT[0] ? byS : byT, rate = hit[0], users = hit[1];
      var peak = Number(sPeak.value), duty = slo.duty_cycles[Number(sDuty.value)];
      if (!(peak > 0)) {
        box.appendChild(el("p", { "class": "kc-slo-none" }, "Give the peak rate as a positive " +
          "number of requests per second."));
        return;
      }
      if (rate <= 0) {
        box.appendChild(el("p", { "class": "kc-slo-none" }, "No request rate meets this " +
          "target: even one request at a time misses it on " + plural(n, "GPU") + "."));
        return;
      }
      var replicas = Math.ceil(peak / rate), gpus = replicas * n, hourly = gpus * price;
      var day = peak * duty * 86400;  // requests a day
      var tiles = el("div", { "class": "kc-tiles" });
      box.appendChild(tiles);
      tile(tiles, "slo_rate", sig3(rate), "requests/s per replica within the target");
      tile(tiles, "slo_users", count(Math.round(users)), "concurrent users per replica");
      tile(tiles, "slo_replicas", count(replicas), "replicas for " + sig3(peak) + " requests/s");
      tile(tiles, "slo_gpus", count(gpus), "GPUs in all");
      tile(tiles, "slo_hour", money(hourly), "per hour");
      tile(tiles, "slo_output", money(hourly * 24 / (day * output) * 1e6),
           "per 1M output tokens over a day");
      tile(tiles, "slo_tokens", money(hourly * 24 / (day * (output + prompt)) * 1e6),
           "per 1M tokens, input and output, over a day");
      box.appendChild(el("p", { "class": "kc-slo-load" }, "One replica completes " +
        sig3(c[0]) + " requests/s with its queue full; within the target it runs at " +
        Math.round(rate / c[0] * 100) + "% of that."));
      box.appendChild(el("p", { "class": "kc-slo-duty" }, "Over a day: $ per 1M output tokens " +
        "= GPUs × $ per GPU-hour × 24 h ÷ (peak requests/s × output tokens × share of the day " +
        "at peak × 86,400 s) × 10⁶: the GPUs are paid all day, tokens come only at the peak (" +
        Math.round(duty * 100) + "% of the day)."));
      var e = slo.error;
      if (e && e.ttft_longer !== undefined) {
        box.appendChild(el("p", { "class": "kc-slo-error" }, "TTFT is a floor: against " +
          plural(e.ttft_n, "published benchmark point") + " below 90% of saturation, measured " +
          "p99 TTFT ran a median " + Math.round(e.ttft_longer * 100) + "% longer than " +
          "simulated; the simulated time per output token was off by a median " +
          pct(e.tpot_error) + " (" + plural(e.tpot_n, "point") + ", Appendix A)."));
      }
    }

    // Cost against per-user speed at the full batch, one point per GPU count of this case.
    function frontier(options, price, chosen) {
      var pts = options.filter(function (o) { return o[N] > 0; }).map(function (o) {
        return { n: o[N], x: o[cols.per_user_tokens_per_s], y: o[cols.output_cost] * price };
      });
      if (pts.length < 2) { return; }
      var W = 320, H = 160, L = 52, B = 30, T = 24, ns = "http://www.w3.org/2000/svg";
      var xs = pts.map(function (p) { return p.x; }), ys = pts.map(function (p) { return p.y; });
      // each axis spans its points, padded by a tenth of their range (or of the value)
      function span(v) {
        var lo = Math.min.apply(null, v), hi = Math.max.apply(null, v);
        var pad = (hi - lo) * 0.1 || lo * 0.1 || 1;
        return [lo, hi, lo - pad, hi + pad];
      }
      // the price axis starts at zero, so a few percent between GPU counts look a few percent
      var sx = span(xs), sy = span(ys), x0 = sx[2], x1 = sx[3], y0 = 0, y1 = sy[1] * 1.1;
      var fig = el("figure", { "class": "kc-frontier" });
      var svg = document.createElementNS(ns, "svg");
      svg.setAttribute("viewBox", "0 0 " + W + " " + H);
      svg.setAttribute("role", "img");
      svg.setAttribute("style", "width: 100%; max-width: 440px; display: block");
      function node(tag, attrs, text) {
        var n = document.createElementNS(ns, tag);
        Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
        if (text !== undefined) { n.textContent = text; }
        svg.appendChild(n);
        return n;
      }
      function px(x) { return L + (x - x0) / (x1 - x0) * (W - L - 45); }
      function py(y) { return H - B - (y - y0) / (y1 - y0) * (H - B - T); }
      node("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "currentColor" });
      node("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "currentColor" });
      node("text", { x: (L + W) / 2, y: H - 4, "text-anchor": "middle", "font-size": "10" },
           "tokens/s per user");
      node("text", { x: 4, y: 10, "font-size": "10" }, "$ per 1M output tokens");
      // zero, the dearest, and the cheapest where its label clears the dearest's
      (sy[1] - sy[0] > 0.15 * sy[1] ? [0, sy[0], sy[1]] : [0, sy[1]]).forEach(function (y) {
        node("text", { x: L - 4, y: py(y) + 3, "text-anchor": "end", "font-size": "9" }, money(y));
      });
      [sx[0], sx[1]].forEach(function (x) {
        node("text", { x: px(x), y: H - B + 11, "text-anchor": "middle", "font-size": "9" }, sig3(x));
      });
      node("polyline", { points: pts.map(function (p) { return px(p.x) + "," + py(p.y); }).join(" "),
                         fill: "none", stroke: "#4c78a8" });
      pts.forEach(function (p) {
        var c = node("circle", { cx: px(p.x), cy: py(p.y), r: p.n === chosen ? 5 : 3.5,
                                 fill: "#4c78a8", "data-n": p.n });
        c.appendChild(document.createElementNS(ns, "title")).textContent =
          p.n + (p.n === 1 ? " GPU: " : " GPUs: ") + sig3(p.x) + " tokens/s per user, " + money(p.y) + " per 1M";
      });
      // each point's label carries its price, alternately above and below the line so that
      // neighbours do not overlap
      pts.slice().sort(function (a, b) { return a.x - b.x; }).forEach(function (p, i) {
        node("text", { x: px(p.x), y: py(p.y) + (i % 2 ? 14 : -7), "text-anchor": "middle",
                       "font-size": "9" }, p.n + " GPU" + (p.n > 1 ? "s" : "") + " " + money(p.y));
      });
      fig.appendChild(svg);
      fig.appendChild(el("figcaption", {}, "Per GPU count of one replica (tensor parallel): " +
        "the price of an output token against each user's speed, with the pool full."));
      card.appendChild(fig);
    }

    sEngine.value = String(state.engine);
    sModel.value = String(state.model);
    sGpu.value = String(state.gpu);
    sKv.value = String(data.kv_dtypes.indexOf(d.kv_dtype));
    engineChanged(true);
    sPrompt.value = String(data.prompts.indexOf(d.input_tokens));
    sOutput.value = String(data.outputs.indexOf(d.output_tokens));
    modelChanged(true);
    gpuChanged(true);
    lengthsChanged();

    sEngine.addEventListener("change", function () {
      state.engine = Number(sEngine.value); engineChanged(false); render();
    });
    sModel.addEventListener("change", function () {
      state.model = Number(sModel.value); modelChanged(false); lengthsChanged(); render();
    });
    sGpu.addEventListener("change", function () {
      state.gpu = Number(sGpu.value); gpuChanged(false); render();
    });
    sKind.addEventListener("change", function () { priceFromKind(true); render(); });
    sTp.addEventListener("change", function () { state.n = Number(sTp.value); render(); });
    if (slo) {
      [sTtft, sSpeed, sDuty].forEach(function (s) { s.addEventListener("change", render); });
      sPeak.addEventListener("input", render);
    }
    sPrice.addEventListener("input", function () {
      state.price = Number(sPrice.value); state.custom = true; render();
    });
    [sWeights, sKv, sUtil].forEach(function (s) { s.addEventListener("change", render); });
    [sLen, sPrompt, sOutput].forEach(function (s) {
      s.addEventListener("change", function () { lengthsChanged(); render(); });
    });
    render();
  }

  function start() {
    document.querySelectorAll("script.kvlib-calculator-data").forEach(function (node) {
      var root = document.getElementById(node.dataset.target);
      if (!root || root.dataset.ready) { return; }
      root.dataset.ready = "pending";
      var payload = JSON.parse(node.textContent);
      unpack(payload.data).then(function (data) {
        build(root, data);
        root.dataset.ready = "yes";
        window.kvlibCalculatorsReady += 1;
      }).catch(function (err) { window.kvlibCalculatorErrors.push(String(err)); });
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
