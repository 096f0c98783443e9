-- cli_export.lua: `lwopt export CKPT --format hf-gpt2|nanogpt|hf-llama|nanochat OUT_DIR`: its
-- flags, usage and printing; the export itself (reading the checkpoint, converting, writing
-- OUT_DIR) is the library's (lwopt.export).
local flags = require("lwopt.flags")
local errors = require("lwopt.errors")
local export = require("lwopt.export")

local cli_export = {}

-- The place export's errors name, said once by the command.
local WHERE = "export"

-- GPT-2's formats, LLaMA's and nanochat's
local FORMATS = export.FORMATS

local FLAGS = {
   { "format", FORMATS, nil, "the files to write: hf-gpt2 (transformers' GPT2LMHeadModel: "
     .. "Conv1D weights transposed, zero biases, the real vocabulary), nanogpt (nanoGPT's GPT "
     .. "state dict and GPTConfig) or hf-llama (transformers' LlamaForCausalLM, of an --arch "
     .. "llama run) or nanochat (nanochat's GPT state dict and meta.json, of an --arch nanochat "
     .. "run); default: the checkpoint's architecture's (a model of a models file: the first its "
     .. "entry's formats list)" },
   { "n-head", "int", nil, "attention heads, for a file that does not record them", min = 1 },
   { "vocab", "int", nil, "the tokenizer's vocabulary, for a file that does not record it "
     .. "(the rows above it are lwopt's padding, left out of hf-gpt2)", min = 1 },
   require("lwopt.app.cli_models").FLAG,
   { "help", "bool", false, "this text" },
}

local USAGE = "usage: lwopt export CKPT [--format hf-gpt2|nanogpt|hf-llama|nanochat] "
   .. "[--models FILE]... OUT_DIR\n"
   .. "  CKPT: a checkpoint step directory, a --ckpt-dir (its newest whole checkpoint), or a\n"
   .. "  model.safetensors / --save-params file; writes OUT_DIR/model.safetensors and "
   .. "OUT_DIR/config.json (nanochat: OUT_DIR/meta.json)\n" .. flags.usage(FLAGS)

-- `lwopt export`: returns the exit status (2: usage, 1: an error, both said in one line).
function cli_export.main(argv, out, err)
   local v, positional = flags.parse(argv, FLAGS)
   local function usage_error(msg)
      err:write("lwopt export: ", msg, " (lwopt export --help lists the flags)\n")
      return 2
   end
   if v == nil then return usage_error(positional) end
   if v.help then
      out:write(USAGE, "\n")
      return 0
   end
   if #positional ~= 2 then
      return usage_error(("needs CKPT and OUT_DIR, got %d argument%s"):format(#positional,
         #positional == 1 and "" or "s"))
   end
   local ok, r = pcall(export.run, { ckpt = positional[1], out_dir = positional[2],
      format = v.format, n_head = v.n_head, vocab = v.vocab })
   if not ok then
      -- one line: export's name once, then the problem without the places it passed through
      err:write("lwopt export: ", errors.plain((tostring(r):gsub("^" .. WHERE .. ": ", ""))), "\n")
      return 1
   end
   local c = r.cfg
   if r.src.note then out:write("export: ", r.src.note, "\n") end
   if r.format == "nanochat" then
      out:write(("exported %s%s as nanochat: %s (%d tensors, %.2fM values; vocabulary %d in "
         .. "nanochat's %d rows%s; smear gate and backout scalar zero: off, as lwopt's model has "
         .. "neither), %s\n"):format(r.src.what, r.src.step and (" (step %d)"):format(r.src.step)
         or "", r.file, r.tensors, r.values / 1e6, c.vocab, c.rows, c.lwopt_rows > c.rows
         and (", lwopt's padding rows %d-%d left out"):format(c.rows, c.lwopt_rows - 1) or "",
         r.config))
      return 0
   end
   local real = r.format ~= "nanogpt" -- the real vocabulary, not the padded rows
   local llama = r.format == "hf-llama"
   out:write(("exported %s%s as %s: %s (%d tensors, %.2fM values; vocabulary %d%s%s%s), %s\n")
      :format(r.src.what, r.src.step and (" (step %d)"):format(r.src.step) or "", r.format,
      r.file, r.tensors, r.values / 1e6, real and c.vocab or c.rows,
      real and c.rows ~= c.vocab and (", padding rows %d-%d left out")
         :format(c.vocab, c.rows - 1) or "",
      r.dropped and ("; tied LM head left out: transformers ties lm_head to %s")
         :format(llama and "model.embed_tokens" or "transformer.wte") or "",
      llama and c.rope_pairing == "interleaved" and "; Q and K rows turned from the interleaved "
         .. "rotary pairing to transformers' halves" or "", r.config))
   return 0
end

return cli_export
