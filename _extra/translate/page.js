// The translation box: loads onnxruntime-web and the model from the book's own files (classic <script> tags,
// which browsers allow from file:// too), then translates what the reader types and draws the cross-attention.
(function () {
  "use strict";
  const base = document.currentScript.src.replace(/[^/]*$/, "");  // the folder of this file: translate/

  // Load one classic script, resolving when it has run.
  const loadScript = (src) => new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = base + src;
    s.onload = resolve;
    s.onerror = () => reject(new Error(`could not load ${base + src}`));
    document.head.appendChild(s);
  });

  const fromBase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

  // onnxruntime-web's WebAssembly and the model, once per page: one thread (no workers, which file:// refuses),
  // the wasm binary handed over as bytes and its JavaScript glue as a blob, so that nothing is fetched.
  let ready = null;
  function loadTranslator() {
    ready = ready || (async () => {
      await loadScript("vendor/ort.wasm.min.js");
      await loadScript("vendor/ort-wasm.js");
      await loadScript("model.js");
      const ort = window.ort, model = window.TranslateModel;
      ort.env.wasm.numThreads = 1;
      ort.env.wasm.wasmBinary = fromBase64(window.OrtWasm.binary);
      const glue = new Blob([window.OrtWasm.glue], { type: "text/javascript" });
      ort.env.wasm.wasmPaths = { mjs: URL.createObjectURL(glue) };
      const files = Object.fromEntries(Object.entries(model.files).map(([name, data]) => [name, fromBase64(data)]));
      const options = { externalData: [{ path: "weights.bin", data: files["weights.bin"] }] };
      const encoder = await ort.InferenceSession.create(files["encoder.onnx"], options);
      const step = await ort.InferenceSession.create(files["decoder_step.onnx"], options);
      return { translator: new window.OnnxTranslator(ort, encoder, step, model.config),
               tokenizer: new window.BpeTokenizer(model.tokenizer), about: model.about };
    })();
    return ready;
  }

  // The cross-attention of every layer (rows) and head (columns) as the chapter's heat maps draw it.
  function drawAttention(element, tokenizer, attention) {
    if (typeof window.vegaEmbed !== "function") {
      element.textContent = "(the attention map needs the book's Vega bundle)";
      return;
    }
    const label = (i, id) => `${String(i).padStart(2, "0")} ${tokenizer.piece(id).trim() || "␣"}`;
    const values = [];
    attention.maps.forEach((heads, l) => heads.forEach((rows, h) => rows.forEach((row, i) => row.forEach((weight, j) =>
      values.push({ layer: l + 1, head: h + 1, query: label(i, attention.tgt[i]), key: label(j, attention.src[j]),
                    weight })))));
    const spec = {
      data: { values },
      facet: { row: { field: "layer", type: "ordinal" }, column: { field: "head", type: "ordinal" } },
      spec: { width: 140, height: 140, mark: "rect", encoding: {
        x: { field: "key", type: "ordinal", title: null, axis: { labelAngle: -60 } },
        y: { field: "query", type: "ordinal", title: null },
        color: { field: "weight", type: "quantitative", scale: { scheme: "blues", domain: [0, 1] } } } },
    };
    window.vegaEmbed(element, spec, { actions: false }).catch((e) => { element.textContent = String(e); });
  }

  // One box: a text field, greedy or beam 4, the translation, the map, and what model runs.
  function setUp(box) {
    const input = box.querySelector(".translate-input"), button = box.querySelector(".translate-button");
    const output = box.querySelector(".translate-output"), status = box.querySelector(".translate-status");
    const map = box.querySelector(".translate-map"), about = box.querySelector(".translate-about");
    const say = (text, state) => { status.textContent = text; box.dataset.state = state; };
    say("Loading the model…", "loading");
    loadTranslator().then(({ about: info }) => {
      about.textContent = info.text;
      button.disabled = false;
      say("Ready.", "ready");
    }, (e) => say(`The model could not be loaded: ${e.message}`, "error"));

    async function translate() {
      const { translator, tokenizer } = await loadTranslator();
      const beam = box.querySelector(".translate-decoding:checked").value === "beam";
      const ids = tokenizer.encodeSentence(input.value);
      if (!ids.length) { say("Type a German sentence first.", "ready"); return; }
      if (ids.length + 1 > translator.config.max_len) {
        say(`That is ${ids.length} tokens; the model reads at most ${translator.config.max_len - 1}.`, "ready");
        return;
      }
      button.disabled = true;
      say(beam ? "Translating (beam 4)…" : "Translating (greedy)…", "busy");
      const start = performance.now();
      const out = beam ? await translator.beam(ids, 4, 0.6) : await translator.greedy(ids);
      output.textContent = tokenizer.decode(out);
      const seconds = (performance.now() - start) / 1000;
      say(`${ids.length} source tokens → ${out.length} output tokens in ${seconds.toFixed(2)} s, in this browser.`,
          "done");
      button.disabled = false;
      drawAttention(map, tokenizer, await translator.attention(ids, out));
    }
    const run = () => translate().catch((e) => {
      say(`Translation failed: ${e.message}`, "error");
      button.disabled = false;
    });
    button.addEventListener("click", run);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); run(); } });
  }

  const start = () => document.querySelectorAll(".translate-box").forEach(setUp);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
