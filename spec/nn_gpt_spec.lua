-- nn_gpt_spec.lua: lw.nn.GPT's parameters as lw.arch.gpt declares them, and a tiny GPT's loss
-- and gradients against a slow pure-Lua reference.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn
local bind = require("nn_helpers").bind
local cross_entropy = require("nn_helpers").cross_entropy
local linear = require("nn_helpers").linear
local model_check = require("model_check")

describe("lw.nn.GPT", function()
   it("declares the parameters of lw.arch.gpt, in order", function()
      for _, cfg in ipairs({ { n_layer = 2, n_embd = 16, n_head = 2, vocab = 50, seq_len = 8 },
         { n_layer = 1, n_embd = 8, n_head = 2, vocab = 20, seq_len = 4, tied = false, bias = true },
         { n_layer = 2, n_embd = 8, n_head = 2, vocab = 20, seq_len = 4, n_expert = 3,
           shared_expert = true },
         { n_layer = 1, n_embd = 8, n_head = 2, vocab = 20, seq_len = 4, bias = true, n_expert = 4,
           topk = 1, expert_hidden = 12, router_muon = true } }) do
         local mine, theirs = nn.GPT.new(cfg):parameters(), lw.arch.gpt(cfg)
         assert.equal(#theirs, #mine)
         for i, s in ipairs(theirs) do
            assert.same({ s.name, s.shape, s.role, s.shared_embedding, s.expert, s.use_muon },
               { mine[i].name, mine[i].shape, mine[i].role, mine[i].shared_embedding,
                 mine[i].expert, mine[i].use_muon })
         end
      end
   end)
end)

-- ---- a slow reference GPT in plain Lua, double precision ----------------------------------------

local function ref_gpt(P, cfg, tokens, targets, b, t)
   local c, nh, V = cfg.n_embd, cfg.n_head, cfg.vocab
   local hd = c / nh
   local function get(name) return P[name] end
   local function layernorm(x, w, bias)
      local y = {}
      for r = 1, #x do
         local mean, var = 0, 0
         for k = 1, c do mean = mean + x[r][k] end
         mean = mean / c
         for k = 1, c do var = var + (x[r][k] - mean) ^ 2 end
         var = var / c
         y[r] = {}
         for k = 1, c do
            y[r][k] = (x[r][k] - mean) / math.sqrt(var + 1e-5) * w[k] + (bias and bias[k] or 0)
         end
      end
      return y
   end
   local function gelu(v)
      return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)))
   end
   local function vec(name, k) return get(name) and function(i) return get(name)[i] end end
   local x = {}
   for r = 1, b * t do
      x[r] = {}
      local tok, pos = tokens[r - 1], (r - 1) % t
      for k = 1, c do x[r][k] = P["wte.weight"][tok * c + k] + P["wpe.weight"][pos * c + k] end
   end
   for l = 0, cfg.n_layer - 1 do
      local p = "h." .. l .. "."
      local a = layernorm(x, P[p .. "ln_1.weight"], P[p .. "ln_1.bias"])
      local qkv = linear(a, P[p .. "attn.qkv.weight"], P[p .. "attn.qkv.bias"], c, 3 * c)
      local y = {}
      for bi = 0, b - 1 do
         for i = 1, t do
            local r = bi * t + i
            y[r] = {}
            for h = 0, nh - 1 do
               local scores, mx = {}, -math.huge
               for j = 1, i do
                  local s = 0
                  for d = 1, hd do s = s + qkv[r][h * hd + d] * qkv[bi * t + j][c + h * hd + d] end
                  scores[j] = s / math.sqrt(hd)
                  mx = math.max(mx, scores[j])
               end
               local z = 0
               for j = 1, i do scores[j] = math.exp(scores[j] - mx); z = z + scores[j] end
               for d = 1, hd do
                  local s = 0
                  for j = 1, i do s = s + scores[j] / z * qkv[bi * t + j][2 * c + h * hd + d] end
                  y[r][h * hd + d] = s
               end
            end
         end
      end
      local o = linear(y, P[p .. "attn.proj.weight"], P[p .. "attn.proj.bias"], c, c)
      for r = 1, #x do for k = 1, c do x[r][k] = x[r][k] + o[r][k] end end
      local m = layernorm(x, P[p .. "ln_2.weight"], P[p .. "ln_2.bias"])
      local f = linear(m, P[p .. "mlp.fc.weight"], P[p .. "mlp.fc.bias"], c, 4 * c)
      for r = 1, #f do for k = 1, 4 * c do f[r][k] = gelu(f[r][k]) end end
      local pr = linear(f, P[p .. "mlp.proj.weight"], P[p .. "mlp.proj.bias"], 4 * c, c)
      for r = 1, #x do for k = 1, c do x[r][k] = x[r][k] + pr[r][k] end end
   end
   local h = layernorm(x, P["ln_f.weight"], P["ln_f.bias"])
   local head = P["lm_head.weight"] or P["wte.weight"]
   local logits = linear(h, head, nil, c, V)
   local _ = vec
   return cross_entropy(logits, targets)
end

describe("lw.nn.GPT against a slow reference", function()
   for _, cfg in ipairs({ { n_layer = 2, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5 },
      { n_layer = 1, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5, tied = false, bias = true } }) do
      it(("matches loss and gradients (%s, %s)"):format(cfg.tied == false and "untied" or "tied",
         cfg.bias and "bias" or "no bias"), function()
         local model = nn.GPT.new(cfg)
         local d = bind(model)
         local b, t = 2, 5
         local tokens, targets = model_check.batch(b, t, cfg.vocab)
         -- the reference reads the same parameters as Lua arrays (1-based)
         local params = model_check.params_of(model, d)
         local loss = model:forward(tokens, targets, b, t)
         local ref = ref_gpt(params(), model.cfg, tokens, targets, b, t)
         assert.near(ref, loss, 1e-5)
         d:zero_grad()
         model:backward(1)
         model_check.gradients(model, d, function()
            return ref_gpt(params(), model.cfg, tokens, targets, b, t)
         end, 6)
      end)
   end

   it("refuses tokens outside the vocabulary and sequences beyond seq_len", function()
      local model = nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 11, seq_len = 5 }
      bind(model)
      local tokens = ffi.new("int32_t[5]")
      tokens[3] = 11
      assert.has_error(function() model:forward(tokens, nil, 1, 5) end,
         "nn.GPT: token 11 at position 3 is outside [0, 11)")
      assert.has_error(function() model:forward(ffi.new("int32_t[6]"), nil, 1, 6) end,
         "nn.GPT: sequence of 6 exceeds seq_len 5")
   end)
end)
