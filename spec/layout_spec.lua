-- layout_spec.lua: lw.layout.compute and the layout object (docs/lua.md). The C tests
-- hold most hand-worked offsets; these check that Lua sees the same, in the contract's shape.
local lw = require("lwopt")
local dkjson = require("dkjson")

local function mat(name, rows, cols, extra)
   local s = { name = name, shape = { rows, cols }, dtype = "f32", role = "matrix" }
   for k, v in pairs(extra or {}) do s[k] = v end
   return s
end

local gpt124 = { n_layer = 12, n_embd = 768, n_head = 12 }

describe("lw.layout.compute", function()
   it("places four equal matrices two per shard at dp 2 with no padding", function()
      local specs = { mat("p0", 64, 64), mat("p1", 64, 64), mat("p2", 64, 64), mat("p3", 64, 64) }
      for _, algorithm in ipairs({ "cost", "lpt", "size_matching" }) do
         local l = lw.layout.compute(specs, { dp = 2, algorithm = algorithm })
         assert.same({ buffer = 1, bucket = 1, start = 0, stop = 4096, owner = 0, numel = 4096 },
            l:place("p3"))
         assert.equal(4096, l:place("p1").start)
         assert.equal(0, l:place("p1").owner)
         assert.equal(8192, l:place("p2").start)
         assert.equal(1, l:place("p2").owner)
         assert.equal(12288, l:place("p0").start)
         assert.equal(0, l:stats().padding)
      end
   end)

   it("returns buffers with keys and buckets readable by name and by position", function()
      local l = lw.layout.compute(lw.arch.gpt(gpt124), { dp = 8 })
      assert.equal(2, #l.buffers)
      local adamw, muon = l.buffers[1], l.buffers[2]
      assert.same({ "f32", "f32", false, "adamw", false }, { adamw.key[1], adamw.key[2],
         adamw.key[3], adamw.key[4], adamw.key[5] })
      assert.equal("f32", muon.key.param_dtype)
      assert.equal("f32", muon.key.grad_dtype)
      assert.is_false(muon.key.expert)
      assert.is_true(muon.key.whole)
      assert.equal("muon", muon.key.optimizer)
      assert.equal("cost", muon.algorithm)
      assert.equal("distopt", adamw.algorithm)
      assert.equal(8, muon.dp)
      local b = muon.buckets[1]
      assert.equal(0, b.start)
      assert.equal(b.start, b[1])
      assert.equal(b.stop, b[2])
      assert.equal(b.shard_size, b[3])
      assert.equal(b.numel_unpadded, b[4])
      assert.equal(8 * b.shard_size, b.stop - b.start)
      assert.equal(muon.numel, muon.buckets[#muon.buckets].stop)
   end)

   it("lays GPT-2 124M out at dp 8 with every matrix owned whole and no Muon padding", function()
      local l = lw.layout.compute(lw.arch.gpt(gpt124), { dp = 8 })
      local s = l:stats()
      assert.equal(124373760, s.numel)
      assert.equal(84934656, s.muon_numel)
      assert.equal(0, s.muon_padding)
      assert.equal(1, s.numel_imbalance)
      assert.equal(8, s.ranks)
      local owners = {}
      for _, p in ipairs(l.params) do
         if p.optimizer == "muon" then owners[p.owner] = (owners[p.owner] or 0) + p.numel end
      end
      for r = 0, 7 do assert.equal(84934656 / 8, owners[r]) end
      assert.is_nil(l:place("wte.weight").owner)
      assert.is_true(l:check())
   end)

   it("isolates the tied embedding in its own distopt bucket", function()
      for _, dp in ipairs({ 2, 4, 8 }) do
         local l = lw.layout.compute(lw.arch.gpt{ n_layer = 1, n_embd = 64, n_head = 2,
            vocab = 100, seq_len = 16 }, { dp = dp })
         local p = l:place("wte.weight")
         local bucket = l.buffers[p.buffer].buckets[p.bucket]
         assert.same({ "wte.weight" }, bucket.params)
         assert.equal(0, bucket.start % 128)
         assert.equal(6400, bucket.numel_unpadded)
      end
   end)

   it("splits into several buckets that follow backprop order with a bucket size", function()
      local l = lw.layout.compute(lw.arch.gpt(gpt124), { dp = 4, bucket_size = 8e6 })
      local muon = l.buffers[2]
      assert.is_true(#muon.buckets > 5)
      local last = 0
      for i = #l.params, 1, -1 do -- backprop order
         local p = l.params[i]
         if p.optimizer == "muon" then
            assert.is_true(p.bucket >= last)
            last = p.bucket
         end
      end
      assert.is_true(l:check())
   end)

   it("routes specs without an optimizer with the default rules", function()
      local l = lw.layout.compute({ mat("w", 64, 64), { name = "g", shape = { 64 }, role = "norm" } })
      assert.is_true(l.buffers[l:place("w").buffer].key.whole)
      assert.is_false(l.buffers[l:place("g").buffer].key.whole)
   end)

   it("honours adamw_layout = aligned by owning AdamW parameters whole", function()
      local l = lw.layout.compute(lw.arch.gpt(gpt124), { dp = 4, adamw_layout = "aligned" })
      assert.equal("cost", l.buffers[1].algorithm)
      assert.is_number(l:place("wpe.weight").owner)
      assert.equal(0, l:place("wte.weight").owner)
      assert.is_true(l:check())
   end)

   it("gives equal hashes for equal inputs and different ones otherwise", function()
      local specs = lw.arch.gpt(gpt124)
      local a = lw.layout.compute(specs, { dp = 8 })
      local b = lw.layout.compute(lw.arch.gpt(gpt124), { dp = 8 })
      assert.equal(a:hash(), b:hash())
      assert.matches("^%x+$", a:hash())
      assert.equal(16, #a:hash())
      assert.not_equal(a:hash(), lw.layout.compute(specs, { dp = 4 }):hash())
      assert.not_equal(a:hash(), lw.layout.compute(specs, { dp = 8, algorithm = "lpt" }):hash())
   end)

   it("reports stats including the cost lower bound", function()
      local specs = { mat("D", 16, 4096), mat("C", 256, 256), mat("A", 16, 4096),
                      mat("B", 256, 256) }
      local lpt = lw.layout.compute(specs, { dp = 2, algorithm = "lpt" }):stats()
      local cost = lw.layout.compute(specs, { dp = 2, algorithm = "cost" }):stats()
      assert.near(33554432 / 17825792, lpt.cost_imbalance, 1e-12)
      assert.equal(1, cost.cost_imbalance)
      assert.equal(1, cost.cost_imbalance_bound)
      assert.same({ 131072, 131072 }, cost.rank_numel)
      assert.same({ 4, 262144, 262144, 0, 0 },
         { cost.params, cost.numel, cost.buffer_numel, cost.padding, cost.overhead })
   end)

   it("packs whole matrices into unequal shards with no padding (packed)", function()
      -- six matrices whose costs balance only unevenly in numel: shards of unequal size
      local specs = { mat("a", 256, 256), mat("b", 64, 32), mat("c", 64, 64), mat("d", 128, 256),
                      mat("e", 128, 128), mat("f", 64, 128) }
      local l = lw.layout.compute(specs, { dp = 2, algorithm = "packed" })
      assert.is_true(l:check())
      local s = l:stats()
      assert.equal(0, s.muon_padding)
      local bucket = l.buffers[1].buckets[1]
      assert.equal(2, #bucket.shards)
      local at = bucket.start
      for r, shard in ipairs(bucket.shards) do
         assert.equal(at, shard.start)
         assert.same({ shard.start, shard.count }, { l:shard(1, 1, r - 1) })
         at = shard.start + shard.count
         for _, name in ipairs(bucket.params) do
            local p = l:place(name)
            if p.owner == r - 1 then
               assert.is_true(p.start >= shard.start and p.stop <= shard.start + shard.count)
            end
         end
      end
      assert.equal(bucket.stop, at)
      assert.not_equal(bucket.shards[1].count, bucket.shards[2].count)
      assert.near(1, s.cost_imbalance / s.cost_imbalance_bound, 1e-12)
      -- equal shards through the same call
      local cost = lw.layout.compute(specs, { dp = 2, algorithm = "cost" })
      local b1 = cost.buffers[1].buckets[1]
      assert.same({ b1.start + b1.shard_size, b1.shard_size }, { cost:shard(1, 1, 1) })
      assert.matches("4 shards up to", lw.layout.compute(specs, { dp = 4, algorithm = "packed" })
         :show(), 1, true)
      assert.matches('"shards":[{', l:json(), 1, true)
   end)

   it("bounds the cost imbalance by pigeonhole, not only by the mean", function()
      -- three equal matrices on two ranks: one rank holds two of them, 4/3 of the mean
      local specs = { mat("a", 64, 64), mat("b", 64, 64), mat("c", 64, 64) }
      local s = lw.layout.compute(specs, { dp = 2, algorithm = "packed" }):stats()
      assert.near(4 / 3, s.cost_imbalance_bound, 1e-12)
      assert.near(4 / 3, s.cost_imbalance, 1e-12)
   end)

   it("draws a map with one row per rank and the stats", function()
      local l = lw.layout.compute(lw.arch.gpt(gpt124), { dp = 4 })
      local text = l:show()
      assert.matches("buffer 2  muon", text, 1, true)
      assert.matches("\n    r3 |", text, 1, true)
      assert.matches("cost per rank: imbalance", text, 1, true)
      assert.equal(text, tostring(l))
      local ascii = l:show{ ascii = true, width = 10 }
      assert.matches("r0 |[#=.]+|", ascii)
      assert.is_nil(ascii:find("█", 1, true))
   end)

   it("sums a layout up without the ranks' rows, padding as a share of the real elements",
      function()
      local l = lw.layout.compute(lw.arch.gpt(gpt124), { dp = 4, bucket_size = 20e6 })
      local text = l:summary{ top = 2 }
      assert.is_nil(text:find("\n    r0 |", 1, true))
      assert.matches(("largest buckets (2 of %d)\n  buffer "):format(#l.buffers[1].buckets
         + #l.buffers[2].buckets), text, 1, true)
      local s = l:stats()
      assert.matches(("padding %s (%.2f%%)"):format(tostring(s.padding):reverse()
         :gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""), 100 * s.padding / s.numel), text, 1,
         true)
      assert.equal(l:show():match("\n(stats\n.*)$"), text:match("\n(stats\n.*)$"))
   end)

   it("serialises to JSON that a separate decoder reads back", function()
      local l = lw.layout.compute(lw.arch.gpt{ n_layer = 2, n_embd = 64, n_head = 2, vocab = 100,
         seq_len = 16 }, { dp = 2, bucket_size = 5000 })
      local doc = assert(dkjson.decode(l:json()))
      assert.equal(l:hash(), doc.hash)
      assert.equal(#l.buffers, #doc.buffers)
      assert.equal(2, doc.options.dp)
      local muon = doc.buffers[2]
      assert.equal(l.buffers[2].buckets[1].stop, muon.buckets[1].stop)
      local first = muon.buckets[1].params[1]
      assert.equal(l:place(first.name).start, first.start)
      assert.equal(l:place(first.name).owner, first.owner)
      assert.is_nil(doc.buffers[1].buckets[1].params[1].owner)
      assert.matches("\"owner\":null", l:json(), 1, true)
   end)

   it("exposes the padding rules", function()
      assert.equal(384, lw.layout.bucket_end_divisor(3))
      assert.equal(65536, lw.layout.bucket_end_divisor(8, true))
      assert.equal(128, lw.layout.shard_divisor(3))
      assert.equal(8192, lw.layout.shard_divisor(8, true))
   end)

   it("lays out a 1.5B GPT-2 at dp 64 and a 64-expert MoE, valid under every algorithm", function()
      local big = lw.arch.gpt{ n_layer = 48, n_embd = 1600, n_head = 25 }
      local moe = lw.models.specs("llama", { n_layer = 2, n_embd = 256, n_head = 4,
         n_kv_head = 2, n_expert = 64, expert_hidden = 128, vocab = 1000 })
      for _, algorithm in ipairs(lw.layout.algorithms) do
         assert.is_true(lw.layout.compute(big, { dp = 64, algorithm = algorithm }):check())
         local l = lw.layout.compute(moe, { dp = 8, expert_dp = 4, algorithm = algorithm,
            bucket_size = 1e5 })
         assert.is_true(l:check())
         local ebuf = l.buffers[l:place("h.0.moe.experts.0.fc.weight").buffer]
         assert.is_true(ebuf.key.expert)
         assert.equal(4, ebuf.dp)
      end
   end)
end)

describe("lw.layout.compute on bad input", function()
   local specs = { mat("w", 8, 8) }
   local function fails(message, s, opts)
      assert.has_error(function() lw.layout.compute(s or specs, opts) end, message)
   end

   it("names a bad dp, expert_dp or bucket size", function()
      fails("lw.layout.compute: layout: dp must be >= 1, got 0", nil, { dp = 0 })
      fails("lw.layout.compute: layout: expert_dp must be >= 1, got 0", nil,
         { dp = 2, expert_dp = 0 })
      fails("lw.layout.compute: layout: bucket_size must be >= 0, got -5", nil,
         { bucket_size = -5 })
      fails("lw.layout.compute: dp must be an integer, got 2.5", nil, { dp = 2.5 })
      fails("lw.layout.compute: dp must be at most 1048576, got 99999999999", nil,
         { dp = 99999999999 })
      fails("lw.layout.compute: expert_dp must be at most 1048576, got 4294967296", nil,
         { dp = 2, expert_dp = 2 ^ 32 })
      fails("lw.layout.compute: bucket_size must be an integer number of elements or nil, got x",
         nil, { bucket_size = "x" })
   end)

   it("names an unknown algorithm, layout or option", function()
      fails("lw.layout.compute: unknown algorithm 'greedy' (one of cost, lpt, size_matching, "
         .. "distopt, default, legacy, rows, packed)", nil, { algorithm = "greedy" })
      fails("lw.layout.compute: unknown adamw_layout 'zero3' (one of distopt, aligned, default, "
         .. "legacy)", nil, { adamw_layout = "zero3" })
      fails("lw.layout.compute: unknown option 'bucket'", nil, { bucket = 10 })
   end)

   it("names a bad shape, dtype or duplicate", function()
      fails("lw.layout.compute: layout: parameter 'e' has 0 dimensions (1 to 4 allowed)",
         { { name = "e", shape = {}, optimizer = "adamw" } })
      fails("lw.layout.compute: layout: parameter 'z' has size 0 in dimension 1 "
         .. "(sizes must be > 0)", { { name = "z", shape = { 0, 3 }, optimizer = "adamw" } })
      fails("lw.layout.compute: layout: parameter 'f' has 5 dimensions (1 to 4 allowed)",
         { { name = "f", shape = { 1, 2, 3, 4, 5 }, optimizer = "adamw" } })
      fails("lw.layout.compute: parameter 'h' has shape {2.5}: sizes must be integers",
         { { name = "h", shape = { 2.5 }, optimizer = "adamw" } })
      fails("lw.layout.compute: parameter 'w' has unknown dtype 'f64'",
         { mat("w", 8, 8, { dtype = "f64" }) })
      fails("lw.layout.compute: layout: duplicate parameter name 'w' (parameters 1 and 2)",
         { mat("w", 8, 8), mat("w", 8, 8) })
   end)

   it("takes tensor-parallel and fused QKV metadata and names bad values", function()
      local qkv = mat("qkv", 24, 16, { tp = { dim = 0, blocks = 3 },
         qkv = { groups = 1, rows = { 8, 8, 8 } } })
      local l = lw.layout.compute({ qkv, mat("o", 16, 8, { tp = { dim = 1 } }) })
      assert.same({ dim = 0, blocks = 3 }, l.params[1].tp)
      -- Q, K and V cost 8 x 16 each, not 24 x 16 together; o 16 x 8
      assert.equal(3 * 16 * 8 * 8 + 16 * 8 * 8, l:stats().rank_cost[1])
      assert.not_equal(l:hash(), lw.layout.compute({ mat("qkv", 24, 16), mat("o", 16, 8) }):hash())
      -- grouped KV heads: unequal Q, K and V blocks (16 rows, not a multiple of 3), as the qkv
      -- rows give them
      local gqa = lw.layout.compute({ mat("gqa", 16, 16, { tp = { dim = 0, blocks = 3 },
         qkv = { groups = 1, rows = { 8, 4, 4 } } }) })
      assert.same({ dim = 0, blocks = 3 }, gqa.params[1].tp)
      fails("lw.layout.compute: layout: parameter 'w' is sharded over TP along dimension 2, but "
         .. "it has 2 dimensions (tp_dim 0 to 1)", { mat("w", 8, 8, { tp = { dim = 2 } }) })
      fails("lw.layout.compute: layout: parameter 'w' has local size 8 along its TP dimension "
         .. "1, not a multiple of its 3 TP blocks",
         { mat("w", 8, 8, { tp = { dim = 1, blocks = 3 } }) })
      fails("lw.layout.compute: parameter 'w' has tp.blocks 0 (>= 1)",
         { mat("w", 8, 8, { tp = { dim = 0, blocks = 0 } }) })
      fails("lw.layout.compute: layout: parameter 'w' has 8 rows, but its 1 qkv groups of 2 + 2 "
         .. "+ 2 rows make 6", { mat("w", 8, 8, { qkv = { groups = 1, rows = { 2, 2, 2 } } }) })
      fails("lw.layout.compute: parameter 'w' has a bad qkv: { groups = g, rows = { q, k, v } } "
         .. "of integers needed", { mat("w", 8, 8, { qkv = { groups = 1, rows = { 8 } } }) })
   end)

   it("refuses a shared embedding on Muon", function()
      fails("lw.layout.compute: layout: parameter 'e' is a shared embedding and cannot be "
         .. "updated by muon, which updates whole matrices",
         { mat("e", 8, 8, { shared_embedding = true, optimizer = "muon" }) })
   end)

   it("errors on an unknown parameter name in place", function()
      local l = lw.layout.compute(specs)
      assert.has_error(function() l:place("nope") end, "layout:place: no parameter named 'nope'")
   end)
end)
