-- tp_spec.lua: tensor parallelism on one rank: lw.tp's refusals with their numbers,
-- its groups on a one-rank world, the shard layout (slices and their reassembly), lw.arch.gpt's
-- specs at tp above 1 (local shapes, tp and full_shape, the qkv field) and at tp 1 (today's specs
-- plus the qkv field), and lw.nn.GPT declaring the same. The multi-rank runs, tp 2 and 3 against
-- tp 1, are tests/lua/tp_consistency.lua.
local ffi = require("ffi")
local lw = require("lwopt")

local function numel(shape)
   local k = 1
   for _, d in ipairs(shape) do k = k * d end
   return k
end

describe("lw.tp.check", function()
   it("refuses a tp that does not divide the ranks, naming both", function()
      assert.equal("tp 3 does not divide the 4 ranks (the world splits into TP groups of tp "
         .. "consecutive ranks)", lw.tp.check(3, 4))
   end)

   it("refuses a tp that does not divide the heads, n_embd or the MLP's hidden size", function()
      assert.equal("tp 4 does not divide the 6 attention heads (each TP rank holds n_head / tp "
         .. "heads)", lw.tp.check(4, 8, { n_head = 6, n_embd = 48 }))
      assert.truthy(lw.tp.check(4, 4, { n_head = 4, n_embd = 10 })
         :find("tp 4 does not divide n_embd 10", 1, true))
      assert.truthy(lw.tp.check(3, 3, { n_head = 3, n_embd = 9, hidden = 10 })
         :find("tp 3 does not divide the MLP's hidden size 10", 1, true))
   end)

   it("refuses a vocabulary tp does not divide unless the model pads it, saying to what", function()
      assert.equal("tp 3 does not divide the vocabulary of 256 (each TP rank holds vocab / tp "
         .. "rows; pad it to 258)", lw.tp.check(3, 3, { vocab = 256 }))
      assert.is_nil(lw.tp.check(3, 3, { vocab = 256, pad_vocab = true }))
      assert.equal(258, lw.tp.padded(256, 3))
      assert.equal(256, lw.tp.padded(256, 2))
   end)

   it("refuses tp with expert parallelism or experts, and accepts good splits", function()
      assert.truthy(lw.tp.check(2, 4, { ep = 2 }):find("tp 2 with ep 2", 1, true))
      assert.truthy(lw.tp.check(2, 4, { n_expert = 8 }):find("mixture of experts (8 experts)",
         1, true))
      assert.truthy(lw.tp.check(0, 4):find("positive integer", 1, true))
      assert.is_nil(lw.tp.check(2, 4, { n_head = 8, n_embd = 256, hidden = 1024, vocab = 256 }))
      assert.is_nil(lw.tp.check(1, 3, { n_head = 5, vocab = 7, n_expert = 8, ep = 3 }))
   end)

   it("splits a one-rank world into one group of tp 1, the world its data-parallel group", function()
      local g = lw.tp.groups(lw.comm.init(), 1)
      assert.same({ 1, 0, 0, 1, 0 }, { g.size, g.rank, g.group, g.dp_size, g.dp_rank })
      assert.equal(1, g.comm.size)
      assert.has_error(function() lw.tp.groups(lw.comm.init(), 2) end,
         "lw.tp: tp 2 does not divide the 1 rank (the world splits into TP groups of tp "
         .. "consecutive ranks)")
   end)
end)

describe("lw.tp's shard layout", function()
   -- the full tensor's elements numbered 0, 1, ...; each rank's shard and back
   local function roundtrip(spec, t)
      local n = numel(spec.full_shape)
      local full, back = ffi.new("float[?]", n), ffi.new("float[?]", n)
      for i = 0, n - 1 do full[i] = i end
      local shards = {}
      for r = 0, t - 1 do
         local part = ffi.new("float[?]", n / t)
         lw.tp.slice(full, spec, t, r, part)
         local list = {}
         for i = 0, n / t - 1 do list[i + 1] = part[i] end
         shards[r + 1] = list
         lw.tp.place(part, spec, t, r, back)
      end
      for i = 0, n - 1 do assert.equal(full[i], back[i]) end
      return shards
   end

   it("gives each rank piece r of every block of rows (the fused QKV weight: blocks 3)", function()
      -- rows Q0 Q1 K0 K1 V0 V1 (2 columns each): rank 0 holds Q0 K0 V0, rank 1 Q1 K1 V1
      local shards = roundtrip({ full_shape = { 6, 2 }, tp = { dim = 0, blocks = 3 } }, 2)
      assert.same({ 0, 1, 4, 5, 8, 9 }, shards[1])
      assert.same({ 2, 3, 6, 7, 10, 11 }, shards[2])
   end)

   it("gives each rank its columns of a row-parallel weight, and its entries of a bias", function()
      local shards = roundtrip({ full_shape = { 2, 6 }, tp = { dim = 1, blocks = 1 } }, 3)
      assert.same({ 0, 1, 6, 7 }, shards[1])
      assert.same({ 4, 5, 10, 11 }, shards[3])
      assert.same({ 3, 4, 5 }, roundtrip({ full_shape = { 6 }, tp = { dim = 0, blocks = 1 } },
         2)[2])
   end)
end)

describe("lw.arch.gpt under tensor parallelism", function()
   local cfg = { n_layer = 1, n_embd = 12, n_head = 6, vocab = 256, seq_len = 8, bias = true,
      tied = false }
   local function at(t, r)
      local c = {}
      for k, v in pairs(cfg) do c[k] = v end
      c.tp, c.tp_rank = t, r
      return lw.arch.gpt(c)
   end
   local function by_name(specs)
      local out = {}
      for _, s in ipairs(specs) do out[s.name] = s end
      return out
   end

   it("gives each TP rank its shards, their tp and full_shape, norms and some biases whole", function()
      local s = by_name(at(3, 2))
      assert.same({ { 12, 12 }, { dim = 0, blocks = 3 }, { 36, 12 } },
         { s["h.0.attn.qkv.weight"].shape, s["h.0.attn.qkv.weight"].tp,
           s["h.0.attn.qkv.weight"].full_shape })
      assert.same({ { 12 }, { dim = 0, blocks = 3 }, { 36 } }, { s["h.0.attn.qkv.bias"].shape,
         s["h.0.attn.qkv.bias"].tp, s["h.0.attn.qkv.bias"].full_shape })
      assert.same({ { 12, 4 }, { dim = 1, blocks = 1 }, { 12, 12 } },
         { s["h.0.attn.proj.weight"].shape, s["h.0.attn.proj.weight"].tp,
           s["h.0.attn.proj.weight"].full_shape })
      assert.same({ { 16, 12 }, { 48, 12 } }, { s["h.0.mlp.fc.weight"].shape,
         s["h.0.mlp.fc.weight"].full_shape })
      assert.same({ { 12, 16 }, { 12, 48 } }, { s["h.0.mlp.proj.weight"].shape,
         s["h.0.mlp.proj.weight"].full_shape })
      -- the vocabulary padded from 256 to 258 rows: 86 a rank
      assert.same({ { 86, 12 }, { 258, 12 } }, { s["wte.weight"].shape, s["wte.weight"].full_shape })
      assert.same({ { 86, 12 }, { 258, 12 } }, { s["lm_head.weight"].shape,
         s["lm_head.weight"].full_shape })
      for _, name in ipairs({ "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
         "h.0.attn.proj.bias", "h.0.mlp.proj.bias", "ln_f.weight" }) do
         assert.is_nil(s[name].tp, name)
         assert.is_nil(s[name].full_shape, name)
      end
      assert.same({ groups = 1, rows = { 4, 4, 4 } }, s["h.0.attn.qkv.weight"].qkv)
      assert.is_nil(s["h.0.attn.qkv.bias"].qkv)
   end)

   it("has every rank declare the same names and shapes, t shards making each full one", function()
      local one = at(1, 0)
      for t = 2, 3 do
         local first = at(t, 0)
         for r = 1, t - 1 do
            local mine = at(t, r)
            for i, s in ipairs(first) do
               assert.same({ s.name, s.shape }, { mine[i].name, mine[i].shape })
            end
         end
         for i, s in ipairs(first) do
            assert.equal(one[i].name, s.name)
            if s.tp then
               local dim = s.tp.dim + 1
               assert.equal(s.full_shape[dim], t * s.shape[dim], s.name)
               assert.equal(lw.tp.padded(one[i].shape[dim], t), s.full_shape[dim], s.name)
            else
               assert.same(one[i].shape, s.shape, s.name)
            end
         end
      end
   end)

   it("leaves tp 1 as it was but for the qkv field on the fused QKV weight", function()
      local plain = {}
      for k, v in pairs(cfg) do plain[k] = v end
      local specs = lw.arch.gpt(plain)
      assert.same(specs, at(1, 0))
      local summary = {}
      for i, s in ipairs(specs) do
         local keys = {}
         for k in pairs(s) do keys[#keys + 1] = k end
         table.sort(keys)
         local qkv = s.name:match("attn%.qkv%.weight$") ~= nil
         assert.same(qkv and { "dtype", "expert", "name", "qkv", "role", "shape",
            "shared_embedding" } or { "dtype", "expert", "name", "role", "shape",
            "shared_embedding" }, keys, s.name)
         if qkv then assert.same({ groups = 1, rows = { 12, 12, 12 } }, s.qkv) end
         summary[i] = ("%s {%s} %s"):format(s.name, table.concat(s.shape, ","), s.role)
      end
      assert.same({ "wte.weight {256,12} embedding", "wpe.weight {8,12} embedding",
         "h.0.ln_1.weight {12} norm", "h.0.ln_1.bias {12} bias",
         "h.0.attn.qkv.weight {36,12} matrix", "h.0.attn.qkv.bias {36} bias",
         "h.0.attn.proj.weight {12,12} matrix", "h.0.attn.proj.bias {12} bias",
         "h.0.ln_2.weight {12} norm", "h.0.ln_2.bias {12} bias",
         "h.0.mlp.fc.weight {48,12} matrix", "h.0.mlp.fc.bias {48} bias",
         "h.0.mlp.proj.weight {12,48} matrix", "h.0.mlp.proj.bias {12} bias",
         "ln_f.weight {12} norm", "ln_f.bias {12} bias", "lm_head.weight {256,12} output" },
         summary)
   end)

   it("refuses a tp rank out of range, a tp the heads refuse, and experts", function()
      assert.has_error(function() at(2, 2) end, "lw.arch.gpt: tp_rank (2) must be below tp (2)")
      assert.has_error(function() at(4, 0) end, "lw.arch.gpt: tp 4 does not divide the 6 "
         .. "attention heads (each TP rank holds n_head / tp heads)")
      assert.has_error(function()
         lw.arch.gpt{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 16, seq_len = 4, n_expert = 2,
            tp = 2 }
      end)
   end)

   it("routes, lays out and gets buffers like any specs, the TP fields kept and ignored", function()
      local specs = lw.route(at(2, 1))
      local layout = lw.layout.compute(specs, { dp = 2 })
      assert.is_true(layout:check())
      local ddp = lw.ddp.new(specs, lw.comm.self(), { mode = "layerwise" })
      local qkv = ddp.specs[ddp:index("h.0.attn.qkv.weight") + 1]
      assert.same({ { 18, 12 }, { dim = 0, blocks = 3 }, { 36, 12 }, "muon" },
         { qkv.shape, qkv.tp, qkv.full_shape, qkv.optimizer })
      assert.equal(18 * 12, ddp:param("h.0.attn.qkv.weight").numel)
   end)

   it("is what lw.nn.GPT declares for the same TP rank, every field included", function()
      for _, t in ipairs({ 1, 2, 3 }) do
         for r = 0, t - 1 do
            local c = {}
            for k, v in pairs(cfg) do c[k] = v end
            c.tp = t > 1 and { size = t, rank = r } or false
            local mine = lw.nn.GPT.new(c):parameters()
            local theirs = at(t, r)
            assert.equal(#theirs, #mine)
            for i, s in ipairs(theirs) do assert.same(s, mine[i]) end
         end
      end
   end)
end)
