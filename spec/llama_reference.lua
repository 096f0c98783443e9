-- llama_reference.lua: a slow float64 LLaMA written from the published architecture (Hugging
-- Face's LlamaForCausalLM: RMSNorm x / sqrt(mean(x^2) + eps) * w, rotary embeddings by halves
-- with rotate_half and theta_i = base^(-2i / hd), grouped KV heads repeated for their query
-- heads, causal softmax over q.k / sqrt(hd), a SwiGLU MLP down(silu(gate(x)) * up(x)), an untied
-- head), with nanochat's parts (QK norm, a sliding window, ReLU^2, parameter-free norms; from
-- nanochat/gpt.py: rotation the other way, rope_reverse; a window per layer, cfg.windows, or
-- from cfg.window_pattern (S and L layers repeated, the last one L); a norm after the embedding,
-- embed_norm (with ln_e's gain when it has one); per-layer residual scalars x =
-- resid_lambdas[i] x + x0_lambdas[i] x0, resid_scalars; value embeddings gated into V on every
-- other layer, the last included, value_embeds: v += scale sigmoid(W_g x[:, :channels]) ve per
-- KV head; the logits' tanh softcap, softcap > 0) and a mixture of experts in place of the MLP
-- (n_expert > 0). lwopt's fused layouts are read as they are declared (qkv rows: Q heads, K
-- heads, V heads; fc rows: gate, up). Returns ref(P, cfg, tokens, targets, b, t): the mean
-- cross-entropy, the summed load-balancing loss and the (capped) logits, a table of b t rows of
-- vocab values.
local nn_helpers = require("nn_helpers")
local cross_entropy, nn_linear = nn_helpers.cross_entropy, nn_helpers.linear

return function(P, cfg, tokens, targets, b, t)
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
   local function linear(x, w, n_in, n_out) return nn_linear(x, w, nil, n_in, n_out) end
   -- head h's hd values of row r of a [rows, heads * hd] table, from column offset `at`
   local function head(v, at, h)
      local out = {}
      for i = 1, hd do out[i] = v[at + h * hd + i] end
      return out
   end
   local function rotate(x, pos)
      local out, half = {}, hd / 2
      for i = 1, half do
         -- nanochat's rotation (rope_reverse) turns by minus the angle
         local theta = (cfg.rope_reverse and -pos or pos) * cfg.rope_base ^ (-2 * (i - 1) / hd)
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
   -- the MLP of prefix p (hidden channels) on rows x: proj(act(fc(x))), fc's rows gate then up for
   -- SwiGLU
   local function mlp(x, p, hidden)
      local swiglu = cfg.activation == "swiglu"
      local f = linear(x, P[p .. "fc.weight"], c, swiglu and 2 * hidden or hidden)
      local act = {}
      for r = 1, #f do
         act[r] = {}
         for k = 1, hidden do
            if swiglu then
               local g = f[r][k]
               act[r][k] = g / (1 + math.exp(-g)) * f[r][hidden + k]
            else
               assert(cfg.activation == "relu2", "no reference for " .. cfg.activation)
               act[r][k] = math.max(f[r][k], 0) ^ 2
            end
         end
      end
      return linear(act, P[p .. "proj.weight"], hidden, c)
   end
   -- The mixture of prefix p on rows x (Switch/GShard-style, as the MoE papers write it):
   -- router softmax, each row's topk most probable experts (ties to the lower index), their
   -- probabilities renormalised to sum to 1 as the weights of the experts' outputs, plus the
   -- shared expert's; and the load-balancing loss aux_coef * E * sum_e f_e P_e (f_e: expert e's
   -- share of the row-slots, P_e: its mean probability).
   local function mixture(x, p)
      local E, k, eh = cfg.n_expert, cfg.topk, cfg.expert_hidden
      local logits = linear(x, P[p .. "router.weight"], c, E)
      local out, count, mean = {}, {}, {}
      for e = 1, E do count[e], mean[e] = 0, 0 end
      local outs = {}
      for e = 1, E do outs[e] = mlp(x, p .. "experts." .. (e - 1) .. ".", eh) end
      local shared = cfg.shared_expert and mlp(x, p .. "shared.", eh)
      for r = 1, #x do
         local mx = -math.huge
         for e = 1, E do mx = math.max(mx, logits[r][e]) end
         local z, pr = 0, {}
         for e = 1, E do pr[e] = math.exp(logits[r][e] - mx); z = z + pr[e] end
         for e = 1, E do pr[e] = pr[e] / z; mean[e] = mean[e] + pr[e] / #x end
         local taken, chosen, sum = {}, {}, 0
         for _ = 1, k do
            local best
            for e = 1, E do
               if not taken[e] and (best == nil or pr[e] > pr[best]) then best = e end
            end
            taken[best] = true
            chosen[#chosen + 1] = best
            sum = sum + pr[best]
            count[best] = count[best] + 1
         end
         out[r] = {}
         for i = 1, c do
            local v = shared and shared[r][i] or 0
            for _, e in ipairs(chosen) do v = v + pr[e] / sum * outs[e][r][i] end
            out[r][i] = v
         end
      end
      local aux = 0
      for e = 1, E do aux = aux + count[e] / (#x * k) * mean[e] end
      return out, cfg.aux_coef * E * aux
   end
   -- layer l's window: S (cfg.window) or L (0) from the pattern repeated, the last layer L
   local function layer_window(l)
      local pattern = cfg.window_pattern
      if pattern == nil then return cfg.window end
      if l == cfg.n_layer - 1 or #pattern == 0 then return 0 end
      local k = l % #pattern + 1
      return pattern:sub(k, k) == "S" and cfg.window or 0
   end
   local aux = 0
   local x = {}
   for r = 1, b * t do
      x[r] = {}
      for k = 1, c do x[r][k] = P["wte.weight"][tokens[r - 1] * c + k] end
   end
   if cfg.embed_norm then x = rmsnorm(x, P["ln_e.weight"], cfg.norm_eps) end
   local x0 = x
   for l = 0, cfg.n_layer - 1 do
      local p = "h." .. l .. "."
      if cfg.resid_scalars then
         local mixed = {}
         for r = 1, #x do
            mixed[r] = {}
            for k = 1, c do
               mixed[r][k] = P.resid_lambdas[l + 1] * x[r][k] + P.x0_lambdas[l + 1] * x0[r][k]
            end
         end
         x = mixed
      end
      local a = rmsnorm(x, P[p .. "ln_1.weight"], cfg.norm_eps)
      local qkv = linear(a, P[p .. "attn.qkv.weight"], c, c + 2 * nkv * hd)
      -- value embeddings: every other layer, the last one included
      if cfg.value_embeds and l % 2 == (cfg.n_layer - 1) % 2 then
         local ve, wg, ch = P[p .. "attn.ve.weight"], P[p .. "attn.ve_gate.weight"],
            cfg.ve_gate_channels
         for r = 1, #qkv do
            for g = 0, nkv - 1 do
               local z = 0
               for j = 1, ch do z = z + wg[g * ch + j] * a[r][j] end
               local gate = cfg.ve_gate_scale / (1 + math.exp(-z))
               for e = 1, hd do
                  qkv[r][c + nkv * hd + g * hd + e] = qkv[r][c + nkv * hd + g * hd + e]
                     + gate * ve[tokens[r - 1] * nkv * hd + g * hd + e]
               end
            end
         end
      end
      local window = cfg.windows and cfg.windows[l + 1] or layer_window(l)
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
               local first = window > 0 and math.max(1, i - window) or 1
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
      local d
      if (cfg.n_expert or 0) > 0 then
         local a2
         d, a2 = mixture(m, p .. "moe.")
         aux = aux + a2
      else
         d = mlp(m, p .. "mlp.", H)
      end
      for r = 1, #x do for k = 1, c do x[r][k] = x[r][k] + d[r][k] end end
   end
   local hfin = rmsnorm(x, P["ln_f.weight"], cfg.norm_eps)
   local logits = linear(hfin, P["lm_head.weight"], c, V)
   if (cfg.softcap or 0) > 0 then
      for r = 1, #logits do
         for v = 1, V do logits[r][v] = cfg.softcap * math.tanh(logits[r][v] / cfg.softcap) end
      end
   end
   return cross_entropy(logits, targets), aux, logits
end
