// Translate sentences with the page's own code in node: the page's tokenizer.js and decoding.js, running the page's
// model on the onnxruntime-web that the page vendors. For scripts/web_model_bleu.py.
//   node scripts/web_translate.js VENDOR_FOLDER MODEL_FOLDER greedy|beam < sentences.json > translations.json
const fs = require("fs");
const os = require("os");
const path = require("path");
const url = require("url");

const [vendor, model, decoding] = process.argv.slice(2);
globalThis.window = globalThis;  // ort-wasm.js sets window.OrtWasm
const ort = require(path.resolve(vendor, "ort.wasm.min.js"));  // in node, a CommonJS module
require(path.resolve(vendor, "ort-wasm.js"));
const { OnnxTranslator } = require("../_extra/translate/decoding.js");
const { BpeTokenizer } = require("../_extra/translate/tokenizer.js");

(async () => {
  const read = (name) => new Uint8Array(fs.readFileSync(path.join(model, name)));
  const glue = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ort-")), "glue.mjs");  // node imports modules from files
  fs.writeFileSync(glue, globalThis.OrtWasm.glue);
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.wasmBinary = Buffer.from(globalThis.OrtWasm.binary, "base64");
  ort.env.wasm.wasmPaths = { mjs: url.pathToFileURL(glue).href };
  const options = { externalData: [{ path: "weights.bin", data: read("weights.bin") }] };
  const encoder = await ort.InferenceSession.create(read("encoder.onnx"), options);
  const step = await ort.InferenceSession.create(read("decoder_step.onnx"), options);
  const config = JSON.parse(fs.readFileSync(path.join(model, "config.json"), "utf-8"));
  const translator = new OnnxTranslator(ort, encoder, step, config);
  const tokenizer = new BpeTokenizer(JSON.parse(fs.readFileSync(path.join(model, "tokenizer.json"), "utf-8")));
  const out = [];
  for (const sentence of JSON.parse(fs.readFileSync(0, "utf-8"))) {
    const ids = tokenizer.encode(sentence);
    out.push(tokenizer.decode(decoding === "beam" ? await translator.beam(ids, 4, 0.6) : await translator.greedy(ids)));
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { console.error(String(e)); process.exit(1); });
