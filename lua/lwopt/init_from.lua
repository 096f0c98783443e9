-- init_from.lua: the recipe's --init-from FILE: a run's first weights read from a safetensors
-- file instead of the seeded draws: lwopt's own names (--save-params, a checkpoint's
-- model.safetensors) or an `lwopt export` in hf-gpt2 or nanogpt names (gpt_names.lua, read
-- backwards) or, into a LLaMA, hf-llama names (llama_names.lua: q, k, v and gate, up joined)
-- or, into nanochat's model, nanochat's names (nanochat_names.lua: c_q, c_k, c_v joined).
-- Every name and shape is checked against the model before anything is written; F32, BF16 and
-- F16 tensors are widened to fp32 and written through lw.ddp's with_param, so any ZeRO level,
-- device, parameter dtype, --ep and --tp take them as a checkpoint's. The optimizer state
-- starts fresh.
local ffi = require("ffi")
local weights = require("lwopt.weights")
local names = require("lwopt.gpt_names")
local foreign = require("lwopt.foreign")
local nanochat_names = require("lwopt.nanochat_names")
local tp = require("lwopt.tp")
local errors = require("lwopt.errors")

local init_from = {}

-- Runs fn; true, or false and its error as a string (for comm:agree).
local function protect(fn)
   local ok, err = pcall(fn)
   return ok, (not ok) and tostring(err) or nil
end

-- The plan for a file in another format (fmt: hf-gpt2, nanogpt): its entries by the lwopt
-- parameter they hold, after checking that it is the model's (names, shapes, dtypes) and that
-- the biases lwopt's model lacks are zero there.
local function foreign_plan(f, fmt, cfg, where)
   if (cfg.n_expert or 0) > 0 then
      errors.fail(where, "a %s file holds a dense GPT, and this model is a mixture of experts",
         fmt)
   end
   local list, why = names.map(fmt, cfg)
   if list == nil then errors.fail(where, "%s", why) end
   weights.check(f, list, where, fmt .. "'s names")
   local by_param, dropped = {}, 0
   for _, e in ipairs(list) do
      if e.from == nil then
         local x, worst = weights.read(f, e.name), 0
         for i = 0, weights.numel(e.shape) - 1 do worst = math.max(worst, math.abs(x[i])) end
         if worst ~= 0 then
            errors.fail(where, "'%s' is not zero (largest |value| %g), and this model has no "
               .. "biases: these weights need a model with biases", e.name, worst)
         end
         dropped = dropped + 1
      elseif not e.alias then
         by_param[e.from] = e
      end
   end
   return by_param, dropped
end

-- The model a file format holds, and the model a config builds, in words.
local function file_model(fmt)
   if fmt == "hf-llama" then return "a LLaMA" end
   if fmt == "nanochat" then return "a nanochat model" end
   return "a GPT-2"
end
local function config_model(c)
   if c.value_embeds then return "a nanochat model", "a nanochat model (value embeddings)" end
   if c.position == "rotary" then return "a LLaMA", "a LLaMA (rotary positions)" end
   return "a GPT-2", "a GPT-2 (learned positions)"
end

-- Parameter `spec`'s full tensor (the tp 1 model's, tp.model_shape) as an fp32 host array,
-- from the file: as stored (lwopt names), or through its entry e (foreign.tensor).
local function full_tensor(f, spec, e)
   if e == nil then return weights.read(f, spec.name) end
   return foreign.tensor(f, e, tp.model_shape(spec))
end

-- init_from.load(path, s): collective. s = { ddp, comm (the world's), full_specs (the whole
-- model's parameters under --ep or --tp; nil: ddp.specs), tp (lw.tp.groups), cfg (the model's
-- lw.nn.GPT config), vocab (the tokenizer's vocabulary, below cfg.vocab's padded rows) }.
-- Checks the file on every rank, then writes every parameter of this rank. Returns the line
-- that says what was read.
function init_from.load(path, s)
   local where = "--init-from " .. path
   local ddp = s.ddp
   local f, fmt, by_param, dropped
   local ok, err = protect(function()
      f = foreign.view(weights.open(path, where))
      fmt = foreign.format(f)
      if fmt == "lwopt" then
         local expected = {}
         for _, spec in ipairs(s.full_specs or ddp.specs) do
            expected[#expected + 1] = { name = spec.name, shape = tp.model_shape(spec) }
         end
         weights.check(f, expected, where, "lwopt's names")
      elseif file_model(fmt) ~= config_model(s.cfg) then
         errors.fail(where, "a %s file holds %s, and this model is %s", fmt, file_model(fmt),
            select(2, config_model(s.cfg)))
      elseif fmt == "nanochat" then
         local c = s.cfg
         by_param, dropped = foreign.nanochat_plan(f, { n_layer = c.n_layer, n_embd = c.n_embd,
            n_head = c.n_head, n_kv_head = c.n_kv_head, rows = nanochat_names.rows(s.vocab),
            smear = f.shapes["smear_lambda"] ~= nil }, where), 0
      elseif fmt == "hf-llama" then
         by_param, dropped = foreign.llama_plan(f, s.cfg, s.vocab, where), 0
      else
         local c = s.cfg
         by_param, dropped = foreign_plan(f, fmt, { n_layer = c.n_layer, n_embd = c.n_embd,
            vocab = s.vocab, rows = c.vocab, seq_len = c.seq_len, tied = c.tied ~= false,
            bias = c.bias, mlp_hidden = c.mlp_hidden, n_expert = c.n_expert }, where)
      end
   end)
   s.comm:agree(ok, err)
   local g = s.tp
   for _, spec in ipairs(ddp.specs) do
      local data = full_tensor(f, spec, by_param and by_param[spec.name])
      ddp:with_param(spec.name, function(target)
         if spec.tp and g then
            tp.from_model(data, spec, g.size, g.rank, target.data)
         else
            ffi.copy(target.data, data, 4 * target.numel)
         end
      end)
   end
   local dtypes = weights.dtype_text(f)
   local widened = dtypes ~= "F32" and ", widened to fp32" or ""
   local rounded = ddp.param_dtype == "bf16" and ", rounded to the run's bf16 parameters" or ""
   if fmt == "lwopt" then
      return ("initialised from %s: %d tensors by lwopt's names, %s%s%s; the optimizer starts "
         .. "fresh"):format(path, #f.order, dtypes, widened, rounded)
   end
   local first = fmt == "nanochat" and nanochat_names.rows(s.vocab) or s.vocab
   local rows = first < s.cfg.vocab and fmt ~= "nanogpt"
      and ("; vocabulary rows %d-%d (lwopt's padding) start at zero"):format(first,
         s.cfg.vocab - 1) or ""
   local how = fmt == "hf-gpt2" and " (Conv1D weights transposed back)"
      or fmt == "hf-llama" and (" (q, k, v and gate, up joined into the fused weights%s)")
         :format(s.cfg.rope_pairing == "interleaved"
            and ", Q and K rows turned to the interleaved pairing" or "")
      or fmt == "nanochat" and (" (c_q, c_k and c_v joined into the fused weights%s)"):format(
         f.shapes["smear_lambda"] and "; its zero smear gate and backout left out" or "") or ""
   return ("initialised from %s: %d tensors by %s's names%s%s, %s%s%s%s; the optimizer starts "
      .. "fresh"):format(path, #f.order, fmt, how,
      dropped > 0 and (", %d zero biases dropped"):format(dropped) or "", dtypes, widened,
      rounded, rows)
end

return init_from
