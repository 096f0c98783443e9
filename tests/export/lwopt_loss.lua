-- lwopt_loss.lua: the mean next-token loss that lwopt's own GPT gives a checkpoint's weights on
-- a sequence of token ids, with the softmax taken over the first V ids only (the vocabulary an
-- export keeps: the real one for hf-gpt2 and hf-llama, every row for nanogpt), printed as %.17g.
-- check_hf.py (check_hf_llama.py) compares it with the loss its own numpy GPT-2 (LLaMA) computes
-- from the export alone.
-- Usage: bin/lwopt run tests/export/lwopt_loss.lua CKPT_STEP_DIR V ID ID ...
local ffi = require("ffi")
local lw = require("lwopt")

local dir, V = arg[1], tonumber(arg[2])
local ids = {}
for i = 3, #arg do ids[#ids + 1] = tonumber(arg[i]) end
local m = lw.checkpoint.read_manifest(dir)
local shapes = {}
for _, p in ipairs(m.params) do shapes[p.name] = p.shape end
local e = m.extra
local model
if (e.arch or "gpt") ~= "gpt" then
   -- another architecture (--arch llama): built from the config its checkpoint records
   model = lw.models.build(e.arch, e.model)
else
   model = lw.nn.GPT.new{ n_layer = e.n_layer, n_embd = e.n_embd, n_head = e.n_head,
      vocab = shapes["wte.weight"][1], seq_len = shapes["wpe.weight"][1],
      tied = shapes["lm_head.weight"] == nil, bias = shapes["ln_f.bias"] ~= nil,
      mlp_hidden = shapes["h.0.mlp.fc.weight"][1] }
end
local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
lw.checkpoint.load(dir, { ddp = ddp, weights_only = true })
model:bind(ddp, nil)
local t = #ids - 1
local tokens = ffi.new("int32_t[?]", t)
for i = 0, t - 1 do tokens[i] = ids[i + 1] end
model:forward(tokens, nil, 1, t)
local loss = 0
for r = 0, t - 1 do
   local p = model:next_probs(r)
   local sum = 0
   for j = 0, V - 1 do sum = sum + p[j] end
   loss = loss - math.log(p[ids[r + 2]] / sum)
end
print(("%.17g"):format(loss / t))
