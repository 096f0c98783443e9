-- nn_attention_spec.lua: lw.nn.CausalSelfAttention with grouped KV heads and a sliding window:
-- the qkv weight it declares (whole and as a TP shard), what it refuses, its gradients against
-- finite differences, and its grouped heads against the same heads with their KV heads repeated.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")
local bind, randoms, dot = h.bind, h.randoms, h.dot

local function specs_of(m)
   local out = {}
   for _, s in ipairs(m:parameters()) do out[s.name] = s end
   return out
end

-- A one-process stand-in for lw.tp.groups's table: TP rank r of t (construction communicates
-- nothing).
local function tp_of(t, r) return { size = t, rank = r, comm = lw.comm.self() } end

describe("lw.nn.CausalSelfAttention's KV heads and window", function()
   it("declares qkv {3c, c} with equal Q, K and V rows by default", function()
      local s = specs_of(nn.CausalSelfAttention.new("a.", 8, 2, true))
      assert.same({ 24, 8 }, s["a.qkv.weight"].shape)
      assert.same({ groups = 1, rows = { 8, 8, 8 } }, s["a.qkv.weight"].qkv)
   end)

   it("declares (n_head + 2 n_kv_head) head dims of qkv rows for grouped KV heads", function()
      local m = nn.CausalSelfAttention.new("a.", 16, 4, true, nil, { n_kv_head = 1, window = 3 })
      local s = specs_of(m)
      assert.same({ 16 + 2 * 4, 16 }, s["a.qkv.weight"].shape)
      assert.same({ 24 }, s["a.qkv.bias"].shape)
      assert.same({ groups = 1, rows = { 16, 4, 4 } }, s["a.qkv.weight"].qkv)
      assert.same({ 16, 16 }, s["a.proj.weight"].shape)
      assert.same({ weight = "a.qkv.weight", bias = "a.qkv.bias", head_dim = 4, n_heads = 4,
         n_kv_heads = 1 }, m:qk_clip_target())
   end)

   it("refuses KV heads that do not divide the heads, and a negative window, by name", function()
      assert.has_error(function()
         nn.CausalSelfAttention.new("a.", 12, 3, true, nil, { n_kv_head = 2 })
      end, "nn.CausalSelfAttention a.: n_kv_head (2) must divide n_head (3)")
      assert.has_error(function()
         nn.CausalSelfAttention.new("a.", 12, 3, true, nil, { window = -1 })
      end, "nn.CausalSelfAttention a.: window (-1) must be 0 (every earlier key) or a positive "
         .. "integer")
   end)

   it("splits the KV heads over TP ranks, and refuses a tp that does not divide them", function()
      -- 8 heads of 4 channels reading 2 KV heads: Q 32 rows, K and V 8 each
      local m = nn.CausalSelfAttention.new("a.", 32, 8, false, tp_of(2, 1), { n_kv_head = 2 })
      local s = specs_of(m)["a.qkv.weight"]
      assert.same({ 24, 32 }, s.shape)
      assert.same({ 48, 32 }, s.full_shape)
      assert.same({ dim = 0, blocks = 3, sizes = { 32, 8, 8 } }, s.tp)
      assert.same({ groups = 1, rows = { 16, 4, 4 } }, s.qkv)
      assert.equal(4, m.n_head)
      assert.equal(1, m.n_kv_head)
      -- rank 1 holds Q rows 16..31, K rows 36..39, V rows 44..47 of the full weight
      local rows = {}
      lw.tp.runs(s.full_shape, s.tp, 2, 1, function(_, full, n)
         rows[#rows + 1] = { full / 32, n / 32 }
      end)
      assert.same({ { 16, 16 }, { 36, 4 }, { 44, 4 } }, rows)
      -- equal heads keep today's spec
      local same = specs_of(nn.CausalSelfAttention.new("a.", 32, 8, false, tp_of(2, 0)))
      assert.same({ dim = 0, blocks = 3 }, same["a.qkv.weight"].tp)
      assert.has_error(function()
         nn.CausalSelfAttention.new("a.", 32, 8, false, tp_of(2, 0), { n_kv_head = 1 })
      end, "nn.CausalSelfAttention a.: tp 2 does not divide the 1 KV heads (each TP rank holds "
         .. "n_kv_head / tp of them, with the query heads that read them)")
   end)

   it("has gradients that match finite differences with grouped KV heads and a window", function()
      local m = nn.CausalSelfAttention.new("a.", 8, 4, true, nil, { n_kv_head = 2, window = 2 })
      local d = bind(m)
      local b, t, c = 2, 5, 8
      local n = b * t * c
      local x, r = randoms(n, 3), randoms(n, 5)
      local function loss() return dot(m:forward(x, b, t), r, n) end
      local function worst(p, g, count)
         local w = 0
         for i = 0, count - 1, math.max(1, math.floor(count / 12)) do
            local keep = p[i]
            p[i] = keep + 1e-2
            local up = loss()
            p[i] = keep - 1e-2
            local down = loss()
            p[i] = keep
            local num = (up - down) / 2e-2
            w = math.max(w, math.abs(num - g[i]) / math.max(1, math.abs(num) + math.abs(g[i])))
         end
         return w
      end
      loss()
      local dx = ffi.new("float[?]", n)
      d:zero_grad()
      m:backward(x, r, dx, b, t)
      assert.is_true(worst(x, dx, n) < 2e-2, "input gradient")
      for _, s in ipairs(m:parameters()) do
         local p, g = d:param(s.name), d:grad(s.name)
         assert.is_true(worst(p.data, g.data, p.numel) < 2e-2, s.name)
      end
   end)

   it("gives grouped heads the output of the same heads with their KV heads repeated", function()
      local c, nh, hd, b, t = 16, 4, 4, 2, 9
      local g = nn.CausalSelfAttention.new("a.", c, nh, true, nil, { n_kv_head = 2, window = 3 })
      local full = nn.CausalSelfAttention.new("a.", c, nh, true, nil, { window = 3 })
      local dg, df = bind(g), bind(full)
      -- full's K and V rows of head i are g's rows of KV head i / 2; Q and proj the same
      local gw, fw = dg:param("a.qkv.weight"), df:param("a.qkv.weight")
      local gb, fb = dg:param("a.qkv.bias"), df:param("a.qkv.bias")
      local function row_of(full_row)
         if full_row < c then return full_row end
         local part, i = math.floor((full_row - c) / c), (full_row - c) % c
         local head, within = math.floor(i / hd), i % hd
         return c + (part * 2 + math.floor(head / 2)) * hd + within
      end
      for row = 0, 3 * c - 1 do
         for col = 0, c - 1 do fw.data[row * c + col] = gw.data[row_of(row) * c + col] end
         fb.data[row] = gb.data[row_of(row)]
      end
      df:param("a.proj.weight"):copy(dg:param("a.proj.weight"))
      df:param("a.proj.bias"):copy(dg:param("a.proj.bias"))
      local x = randoms(b * t * c, 11)
      local yg, yf = g:forward(x, b, t), full:forward(x, b, t)
      local differ = 0
      for i = 0, b * t * c - 1 do
         if math.abs(yg[i] - yf[i]) > 1e-6 then differ = differ + 1 end
      end
      assert.equal(0, differ)
   end)

   it("rotates and normalises Q and K in place between qkv and the attention", function()
      local c, nh, b, t = 16, 4, 2, 6
      local opts = { n_kv_head = 2, window = 3, rotary = { base = 100 }, qk_norm = true }
      local m = nn.CausalSelfAttention.new("a.", c, nh, true, nil, opts)
      local plain = nn.CausalSelfAttention.new("a.", c, nh, true, nil, { n_kv_head = 2,
         window = 3 })
      local dm, dp = bind(m), bind(plain)
      for _, s in ipairs(m:parameters()) do dp:param(s.name):copy(dm:param(s.name)) end
      -- the same, by hand: qkv, then Rotary and QKNorm on its output, then the attention
      local x = randoms(b * t * c, 7)
      local y = m:forward(x, b, t)
      local rot = nn.Rotary.new({ head_dim = 4, n_head = nh, n_kv_head = 2, base = 100 })
      local norm = nn.QKNorm.new({ head_dim = 4, n_head = nh, n_kv_head = 2 })
      rot.stream, norm.stream = plain.stream, plain.stream
      local q = plain.qkv:forward(x, b * t)
      rot:forward(q, b, t)
      norm:forward(q, b, t)
      local ref = ffi.new("float[?]", b * t * c)
      local lib = require("lwopt.C").lib
      local scratch = plain:scratch(b, t)
      local lse = ffi.new("float[?]", b * nh * t)
      assert.equal(0, lib.lw_attention_forward(plain.stream, ref, lib.LW_DTYPE_F32, lse, nil,
         scratch, q, lib.LW_DTYPE_F32, b, t, c, nh, 2, 3))
      local yr = plain.proj:forward(ref, b * t)
      for i = 0, b * t * c - 1 do assert.equal(yr[i], y[i]) end
      -- its gradients against finite differences
      local n = b * t * c
      local r = randoms(n, 9)
      local function loss() return dot(m:forward(x, b, t), r, n) end
      loss()
      local dx = ffi.new("float[?]", n)
      dm:zero_grad()
      m:backward(x, r, dx, b, t)
      local w = dm:param("a.qkv.weight")
      local g = dm:grad("a.qkv.weight")
      local worst = 0
      for i = 0, w.numel - 1, 7 do
         local keep = w.data[i]
         w.data[i] = keep + 1e-2
         local up = loss()
         w.data[i] = keep - 1e-2
         local down = loss()
         w.data[i] = keep
         local num = (up - down) / 2e-2
         worst = math.max(worst, math.abs(num - g.data[i]) / math.max(1, math.abs(num)))
      end
      assert.is_true(worst < 2e-2, "qkv weight gradient " .. worst)
   end)
end)
