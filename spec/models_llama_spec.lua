-- models_llama_spec.lua: the registry's llama model (nn.GPT with LLaMA's parts) against a slow
-- float64 LLaMA written here from the published architecture (Hugging Face's LlamaForCausalLM:
-- RMSNorm x / sqrt(mean(x^2) + eps) * w, rotary embeddings by halves with rotate_half and
-- theta_i = base^(-2i / hd), grouped KV heads repeated for their query heads, causal softmax
-- over q.k / sqrt(hd), a SwiGLU MLP down(silu(gate(x)) * up(x)), an untied head); lwopt's fused
-- layouts are read as they are declared (qkv rows: Q heads, K heads, V heads; fc rows: gate,
-- up). Also the parts nanochat adds on the same model: QK norm, a sliding window, ReLU^2 and
-- parameter-free norms. Loss within 1e-5 from the same weights, gradients against the
-- reference's finite differences.
local ffi = require("ffi")
local lw = require("lwopt")
local bind = require("nn_helpers").bind

local function ref_llama(P, cfg, tokens, targets, b, t)
   local c, nh, nkv, V, H = cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.vocab, cfg.mlp_hidden
   local hd = c / nh
   local function rmsnorm(x, w, eps)
      local y = {}
      for r = 1, #x do
         local ms = 0
         for k = 1, #x[r] do ms = ms + x[r][k] ^ 2 end
         local s = 1 / math.sqrt(ms / #x[r] + eps)
         y[r] = {}
         for k = 1, #x[r] do y[r][k] = x[r][k] * s * (w and w[k] or 1) end
      end
      return y
   end
   local function linear(x, w, n_in, n_out)
      local y = {}
      for r = 1, #x do
         y[r] = {}
         for o = 1, n_out do
            local s = 0
            for i = 1, n_in do s = s + x[r][i] * w[(o - 1) * n_in + i] end
            y[r][o] = s
         end
      end
      return y
   end
   -- head h's hd values of row r of a [rows, heads * hd] table, from column offset `at`
   local function head(v, at, h)
      local out = {}
      for i = 1, hd do out[i] = v[at + h * hd + i] end
      return out
   end
   local function rotate(x, pos)
      local out, half = {}, hd / 2
      for i = 1, half do
         local theta = pos * cfg.rope_base ^ (-2 * (i - 1) / hd)
         local cs, sn = math.cos(theta), math.sin(theta)
         out[i] = x[i] * cs - x[i + half] * sn
         out[i + half] = x[i + half] * cs + x[i] * sn
      end
      return out
   end
   local function head_norm(x)
      if not cfg.qk_norm then return x end
      return rmsnorm({ x }, nil, 2 ^ -23)[1]
   end
   local x = {}
   for r = 1, b * t do
      x[r] = {}
      for k = 1, c do x[r][k] = P["wte.weight"][tokens[r - 1] * c + k] end
   end
   for l = 0, cfg.n_layer - 1 do
      local p = "h." .. l .. "."
      local a = rmsnorm(x, P[p .. "ln_1.weight"], cfg.norm_eps)
      local qkv = linear(a, P[p .. "attn.qkv.weight"], c, c + 2 * nkv * hd)
      local att = {}
      for r = 1, b * t do att[r] = {} end
      for s = 0, b - 1 do
         for h = 0, nh - 1 do
            local g = math.floor(h / (nh / nkv))
            local q, k, v = {}, {}, {}
            for i = 1, t do
               local row = qkv[s * t + i]
               q[i] = head_norm(rotate(head(row, 0, h), i - 1))
               k[i] = head_norm(rotate(head(row, c, g), i - 1))
               v[i] = head(row, c + nkv * hd, g)
            end
            for i = 1, t do
               local first = cfg.window > 0 and math.max(1, i - cfg.window) or 1
               local sc, mx = {}, -math.huge
               for j = first, i do
                  local d = 0
                  for e = 1, hd do d = d + q[i][e] * k[j][e] end
                  sc[j] = d / math.sqrt(hd)
                  mx = math.max(mx, sc[j])
               end
               local z = 0
               for j = first, i do sc[j] = math.exp(sc[j] - mx); z = z + sc[j] end
               for e = 1, hd do
                  local o = 0
                  for j = first, i do o = o + sc[j] / z * v[j][e] end
                  att[s * t + i][h * hd + e] = o
               end
            end
         end
      end
      local o = linear(att, P[p .. "attn.proj.weight"], c, c)
      for r = 1, #x do for k = 1, c do x[r][k] = x[r][k] + o[r][k] end end
      local m = rmsnorm(x, P[p .. "ln_2.weight"], cfg.norm_eps)
      local f = linear(m, P[p .. "mlp.fc.weight"], c, cfg.activation == "swiglu" and 2 * H or H)
      local act = {}
      for r = 1, #f do
         act[r] = {}
         for k = 1, H do
            if cfg.activation == "swiglu" then
               local g = f[r][k]
               act[r][k] = g / (1 + math.exp(-g)) * f[r][H + k]
            else
               act[r][k] = math.max(f[r][k], 0) ^ 2
            end
         end
      end
      local d = linear(act, P[p .. "mlp.proj.weight"], H, c)
      for r = 1, #x do for k = 1, c do x[r][k] = x[r][k] + d[r][k] end end
   end
   local hfin = rmsnorm(x, P["ln_f.weight"], cfg.norm_eps)
   local logits = linear(hfin, P["lm_head.weight"], c, V)
   local total = 0
   for r = 1, #logits do
      local mx = -math.huge
      for v = 1, V do mx = math.max(mx, logits[r][v]) end
      local z = 0
      for v = 1, V do z = z + math.exp(logits[r][v] - mx) end
      total = total + (math.log(z) + mx - logits[r][targets[r - 1] + 1])
   end
   return total / #logits
end

describe("lw.models' llama against a float64 LLaMA", function()
   local base = { n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13, seq_len = 6,
      rope_base = 50 }
   local nanochat = { n_layer = 1, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13,
      seq_len = 6, rope_base = 50, qk_norm = true, window = 2, activation = "relu2",
      norm_gain = false, mlp_hidden = 24 }
   for name, cfg in pairs({ llama = base, ["nanochat's parts"] = nanochat }) do
      it(("matches its loss and gradients (%s)"):format(name), function()
         local model = lw.models.build("llama", cfg)
         local full = lw.models.config("llama", cfg)
         local d = bind(model)
         local b, t = 2, 6
         local tokens, targets = ffi.new("int32_t[12]"), ffi.new("int32_t[12]")
         for i = 0, 11 do tokens[i] = (i * 7 + 3) % 13; targets[i] = (i * 5 + 1) % 13 end
         local function params()
            local P = {}
            for _, s in ipairs(model:parameters()) do P[s.name] = d:param(s.name):totable() end
            return P
         end
         local loss = model:forward(tokens, targets, b, t)
         assert.near(ref_llama(params(), full, tokens, targets, b, t), loss, 1e-5)
         d:zero_grad()
         model:backward(1)
         for _, s in ipairs(model:parameters()) do
            local p, g = d:param(s.name), d:grad(s.name)
            local worst, step = 0, math.max(1, math.floor(p.numel / 5))
            for i = 0, p.numel - 1, step do
               local keep = p.data[i]
               p.data[i] = keep + 1e-3
               local up = ref_llama(params(), full, tokens, targets, b, t)
               p.data[i] = keep - 1e-3
               local down = ref_llama(params(), full, tokens, targets, b, t)
               p.data[i] = keep
               local num = (up - down) / 2e-3
               worst = math.max(worst, math.abs(num - g.data[i]) / math.max(1e-2, math.abs(num)))
            end
            assert.is_true(worst < 2e-2, s.name .. " worst " .. worst)
         end
      end)
   end

   it("declares LLaMA's parameters: no positions, RMSNorm gains, GQA's qkv, SwiGLU's fc", function()
      local specs = lw.models.specs("llama", { n_layer = 1, n_embd = 64, n_head = 4,
         n_kv_head = 2, vocab = 100 })
      local got = {}
      for i, s in ipairs(specs) do got[i] = s.name .. " " .. table.concat(s.shape, "x") end
      assert.same({ "wte.weight 100x64", "h.0.ln_1.weight 64", "h.0.attn.qkv.weight 128x64",
         "h.0.attn.proj.weight 64x64", "h.0.ln_2.weight 64", "h.0.mlp.fc.weight 384x64",
         "h.0.mlp.proj.weight 64x192", "ln_f.weight 64", "lm_head.weight 100x64" }, got)
      assert.equal("LLaMA 1 layers x 64, 4 heads (2 KV), sequence 1024",
         lw.models.describe("llama", { n_layer = 1, n_embd = 64, n_head = 4, n_kv_head = 2 }))
      assert.has_error(function()
         lw.models.config("llama", { n_layer = 1, n_embd = 64, n_head = 4, n_kv_head = 3 })
      end, "lw.models.llama: n_kv_head (3) must divide n_head (4)")
   end)
end)
