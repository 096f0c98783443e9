-- stepmodel_spec.lua: lw.stepmodel against small cases worked out by hand (Newton-Schulz FLOPs,
-- ring bytes, overlap with backward and forward, packed's unequal shards, two tiers), its
-- checks of bad input, and the `lwopt layout --model-step / --compare` flags. No timing: every
-- figure is arithmetic on the inputs.
local lw = require("lwopt")
local cli = require("lwopt.app.cli")
local helpers = require("helpers")

local function mat(name, rows, cols)
   return { name = name, shape = { rows, cols }, role = "matrix" }
end

-- Four equal 64 x 128 matrices: at dp 2 with bucket_size 0 the cost layout makes two buckets of
-- two (p3, p2 first in backprop order), one matrix per rank in each.
local four = { mat("p0", 64, 128), mat("p1", 64, 128), mat("p2", 64, 128), mat("p3", 64, 128) }

-- Round numbers: 1 GFLOP/s everywhere, a link of beta bytes/s and alpha s per ring step.
local function machine(beta, alpha)
   return { model_flops = 1e9, ns_flops = 1e9, mem_bandwidth = 1e9,
            intra = { bandwidth = beta, latency = alpha } }
end

local NS = 5 * (4 * 64 * 64 * 128 + 2 * 64 * 64 * 64) -- one 64 x 128 matrix: 13,107,200
local TOKENS = 100
-- 6 FLOPs per matrix element per token: 6 * 4 * 8192 * 100 at 1 GFLOP/s
local COMPUTE = 6 * 4 * 8192 * TOKENS / 1e9
local F, B = COMPUTE / 3, 2 * COMPUTE / 3

local function run(argv)
   local out, err = helpers.sink(), helpers.sink()
   local status = cli.main(argv, out, err)
   return status, out.text(), err.text()
end

describe("lw.stepmodel.predict", function()
   local layout = lw.layout.compute(four, { dp = 2, bucket_size = 0 })

   it("counts Newton-Schulz FLOPs as full GEMMs over the library's default steps", function()
      assert.equal(5, lw.stepmodel.ns_steps)
      assert.equal(NS, lw.stepmodel.ns_flops({ 64, 128 }))
      assert.equal(NS, lw.stepmodel.ns_flops({ 128, 64 }))
      local r = lw.stepmodel.predict(layout, { tokens = TOKENS, machine = machine(1e8, 0) })
      assert.equal(2, #r.ranks)
      for _, w in ipairs(r.ranks) do
         assert.equal(2, w.matrices)
         assert.equal(2 * NS, w.ns_flops)
         assert.near(2 * NS / 1e9, w.ns, 1e-12)
         -- Muon's element-wise update: 24 bytes per element of the two owned matrices
         assert.near(2 * 8192 * 24 / 1e9, w.elementwise, 1e-12)
      end
      assert.near(COMPUTE, r.compute, 1e-12)
      assert.near(F, r.forward, 1e-12)
      assert.near(B, r.backward, 1e-12)
   end)

   it("charges each element-wise rule its own bytes per element, and names a rule it has no "
      .. "figure for", function()
      -- two 64 x 128 matrices on Lion, two on AdamW, element-wise over 2 ranks: half each
      local routed = lw.route(four, { { match = "p[01]", optimizer = "lion" },
         { match = ".", optimizer = "adamw" } })
      local l = lw.layout.compute(routed, { dp = 2, bucket_size = 0 })
      local r = lw.stepmodel.predict(l, { tokens = TOKENS, machine = machine(1e8, 0) })
      for _, w in ipairs(r.ranks) do
         assert.equal(0, w.ns_flops)
         assert.near((8192 * 20 + 8192 * 28) / 1e9, w.elementwise, 1e-12)
      end
      assert.has_error(function()
         lw.stepmodel.predict(l, { tokens = TOKENS, machine = machine(1e8, 0),
            bytes_per_element = { adamw = 28, muon = 24 } })
      end, "lw.planner: bytes_per_element has no figure for the rule 'lion'")
   end)

   it("charges Muon's options their passes over every matrix orthogonalised", function()
      local m = machine(1e8, 0)
      local function step_of(l, muon)
         return lw.stepmodel.predict(l, { tokens = TOKENS, machine = m, muon = muon })
      end
      -- each rank owns two 64 x 128 matrices: an option of b bytes adds 2 * 8192 * b / 1e9 s
      local plain = step_of(layout)
      local per_byte = 2 * 8192 / 1e9
      for _, c in ipairs({
         { {}, 0 },
         { { row_equilibrate = true }, 12 }, -- row norms read, then read and written again
         { { renormalize = true }, 12 }, -- the norm read, then scaled in place
         { { cautious_wd = true }, 0 }, -- its mask taken in the step's own pass
         { { weight_decay_mode = "scaled", coefficients = "nanochat" }, 0 },
         { { row_equilibrate = true, renormalize = true }, 24 },
         { { variant = "nanochat" }, 24 },
         { { variant = "nanochat", renormalize = false }, 12 },
      }) do
         local r = step_of(layout, c[1])
         assert.equal(c[2], r.muon_option_bytes)
         for k, w in ipairs(r.ranks) do
            assert.equal(2 * 8192, w.orthogonalised)
            assert.near(plain.ranks[k].elementwise + c[2] * per_byte, w.elementwise, 1e-12)
         end
         assert.near(plain.step + c[2] * per_byte, r.step, 1e-12)
      end
      -- NorMuon takes Muon's options on top of its own 36 bytes
      local nm = lw.layout.compute(lw.route(four, { { match = ".", optimizer = "normuon" } }),
         { dp = 2, bucket_size = 0 })
      local r = step_of(nm, { variant = "nanochat" })
      for _, w in ipairs(r.ranks) do
         assert.near(2 * 8192 * (36 + 24) / 1e9, w.elementwise, 1e-12)
      end
      -- distopt orthogonalises every matrix on every rank, each updating half the elements
      local d = lw.layout.compute(four, { dp = 2, bucket_size = 0, algorithm = "distopt" })
      r = step_of(d, { row_equilibrate = true })
      for _, w in ipairs(r.ranks) do
         assert.equal(4 * 8192, w.orthogonalised)
         assert.near((2 * 8192 * 24 + 4 * 8192 * 12) / 1e9, w.elementwise, 1e-12)
      end
      -- the variant's ns_steps count unless ns_steps is given
      assert.equal(3 * NS / 5, step_of(layout, { ns_steps = 3 }).ranks[1].ns_flops / 2)
      assert.equal(2 * NS, lw.stepmodel.predict(layout, { tokens = TOKENS, machine = m,
         muon = { ns_steps = 3 }, ns_steps = 5 }).ranks[1].ns_flops)
      -- what lw.optim.new refuses, under the planner's name
      for _, c in ipairs({
         { { variant = "fast" }, "lw.stepmodel: muon options: unknown muon.variant 'fast'" },
         { { renormalise = true },
           "lw.stepmodel: muon options: unknown option 'muon.renormalise'" },
         { "nanochat", "lw.stepmodel: muon must be lw.optim.new's muon options (a table), got "
           .. "string" },
      }) do
         local ok, err = pcall(step_of, layout, c[1])
         assert.is_false(ok)
         assert.matches(c[2], err, 1, true)
      end
   end)

   it("charges a bucket the ring's bytes, (dp - 1) / dp of it, and a latency a step", function()
      local r = lw.stepmodel.predict(layout, { tokens = TOKENS, machine = machine(1e8, 1e-4) })
      assert.equal(2, #r.buckets)
      for _, b in ipairs(r.buckets) do
         assert.equal(16384, b.numel)
         assert.equal(8192 * 4, b.rs.bytes) -- half of 16,384 fp32 gradients
         assert.equal(8192 * 4, b.ag.bytes)
         assert.near(1e-4 + 32768 / 1e8, b.rs.time, 1e-15)
      end
      assert.equal(4 * 32768, r.wire_bytes)
   end)

   it("hides reduce-scatters shorter than the rest of backward, all but the last", function()
      local rs = 1e-4 + 32768 / 1e8
      local r = lw.stepmodel.predict(layout, { tokens = TOKENS, machine = machine(1e8, 1e-4) })
      -- group 1 is the bucket of p0 and p1 (forward order), ready when backward ends
      local first, last = r.buckets[2], r.buckets[1]
      assert.near(B / 2, first.ready, 1e-15)
      assert.near(B / 2, first.rs.start, 1e-15)
      assert.near(B / 2 + rs, first.rs.stop, 1e-15)
      assert.near(B, last.ready, 1e-15)
      assert.near(rs, r.exposed.reduce, 1e-15)
      -- the all-gather of the first group is waited for before forward can start; the second
      -- one is prefetched and done before forward reaches p2
      assert.near(rs, r.exposed.forward, 1e-15)
      assert.near(2 * 1e-4, r.exposed.norm, 1e-15) -- a two-rank tree: 2 log2(2) latencies
      local opt = 2 * NS / 1e9 + 2 * 8192 * 24 / 1e9
      assert.near(opt, r.optimizer, 1e-15)
      assert.near(F + rs + B + rs + 2e-4 + opt, r.step, 1e-12)
   end)

   it("exposes what reduce-scatters and all-gathers longer than the passes leave over", function()
      local t = 32768 / 1e6 -- each collective, no latency
      local r = lw.stepmodel.predict(layout, { tokens = TOKENS, machine = machine(1e6, 0) })
      -- backward: the first reduce-scatter from B / 2 to B / 2 + t, the second queued behind it
      assert.near(B / 2 + t, r.buckets[1].rs.start, 1e-15)
      assert.near(B / 2 + 2 * t, r.buckets[1].rs.stop, 1e-15)
      assert.near(2 * t - B / 2, r.exposed.reduce, 1e-15)
      -- forward: wait t for group 1; group 2's gather (t..2t) is needed at t + F / 2
      assert.near(t + (t - F / 2), r.exposed.forward, 1e-15)
      assert.near(F + (2 * t - F / 2) + B + (2 * t - B / 2) + r.optimizer, r.step, 1e-12)
   end)

   it("gathers again in backward at ZeRO-3, except the group forward ended in", function()
      local t = 32768 / 1e6
      local r = lw.stepmodel.predict(layout,
         { tokens = TOKENS, machine = machine(1e6, 0), zero = 3 })
      -- group 2 (p2, p3) is still held; group 1's gather is prefetched at the start (0..t), so
      -- backward waits t - B / 2 for it; the reduce-scatters queue behind: t..2t, then 2t..3t
      assert.near(t - B / 2, r.exposed.backward, 1e-15)
      assert.near(2 * t - B / 2, r.exposed.reduce, 1e-15)
      assert.is_nil(r.buckets[2].ag_backward)
      assert.near(0, r.buckets[1].ag_backward.start, 1e-15)
      assert.equal(4 * 32768 + 32768, r.wire_bytes)
   end)

   it("makes the shared embedding's gradient ready only at the end of backward", function()
      local specs = lw.arch.gpt{ n_layer = 2, n_embd = 64, n_head = 2, vocab = 128, seq_len = 16 }
      local l = lw.layout.compute(specs, { dp = 2 })
      local r = lw.stepmodel.predict(l, { tokens = TOKENS, machine = machine(1e8, 0) })
      local wte = l:place("wte.weight")
      for _, b in ipairs(r.buckets) do
         if b.buffer == wte.buffer and b.bucket == wte.bucket then
            assert.near(r.backward, b.ready, 1e-15)
         end
      end
      -- 6 per element of the eight block matrices and of the tied head
      assert.equal(6 * (2 * (3 + 1 + 4 + 4) * 64 * 64 + 128 * 64), r.flops_per_token)
   end)

   it("bounds unequal shards by the largest (ring) or the busiest rank (pipelined)", function()
      local l = lw.layout.compute({ mat("a", 64, 64), mat("b", 64, 128), mat("c", 64, 320) },
         { dp = 3, algorithm = "packed" })
      local counts = {}
      for r, sh in ipairs(l.buffers[1].buckets[1].shards) do counts[r] = sh.count end
      table.sort(counts)
      assert.same({ 4096, 8192, 20480 }, counts)
      local m = machine(1e6, 0)
      local ring = lw.stepmodel.predict(l, { tokens = TOKENS, machine = m })
      -- two lock-step steps, each as long as the largest shard: 2 * 20,480 * 4 bytes
      assert.near(2 * 20480 * 4 / 1e6, ring.buckets[1].rs.time, 1e-15)
      m.variable = "pipelined"
      local pipelined = lw.stepmodel.predict(l, { tokens = TOKENS, machine = m })
      -- the rank with the smallest shard sends both others: (8,192 + 20,480) * 4 bytes
      assert.near((8192 + 20480) * 4 / 1e6, pipelined.buckets[1].rs.time, 1e-15)
      assert.equal((8192 + 20480) * 4, ring.buckets[1].rs.bytes)
      -- whole matrices by LPT on cost: each rank orthogonalises its one matrix
      local flops = {}
      for r, w in ipairs(ring.ranks) do flops[r] = w.ns_flops end
      table.sort(flops)
      assert.same({ lw.stepmodel.ns_flops({ 64, 64 }), lw.stepmodel.ns_flops({ 64, 128 }),
                    lw.stepmodel.ns_flops({ 64, 320 }) }, flops)
   end)

   it("goes hierarchical when dp spans nodes: a ring inside each node, then one across", function()
      local m = lw.stepmodel.machine{ model_flops = 1e9, ns_flops = 1e9, mem_bandwidth = 1e9,
         intra = { bandwidth = 1e8, latency = 1e-5 }, inter = { bandwidth = 1e7, latency = 1e-4 },
         devices_per_node = 2 }
      local shards = { 32768, 32768, 32768, 32768 } -- 4 ranks on 2 nodes
      -- inside a node: 2 ranks, each block two nodes' shards (65,536 B): 1e-5 + 65536 / 1e8;
      -- across: 2 nodes, 32,768 B each: 1e-4 + 32768 / 1e7
      local expect = 1e-5 + 65536 / 1e8 + 1e-4 + 32768 / 1e7
      assert.near(expect, lw.stepmodel.collective_time(m, "rs", shards), 1e-15)
      assert.near(2 * (1e-5 + 1e-4), lw.stepmodel.small_allreduce_time(m, 4), 1e-15)
      -- on one node it is one ring: 3 steps of 32,768 B
      local flat = lw.stepmodel.machine{ model_flops = 1, ns_flops = 1, mem_bandwidth = 1,
         intra = { bandwidth = 1e8, latency = 1e-5 } }
      assert.near(3 * (1e-5 + 32768 / 1e8), lw.stepmodel.collective_time(flat, "rs", shards),
         1e-15)
      -- and predict uses it for a dp-4 layout of the four matrices (one bucket, 4 shards)
      local l = lw.layout.compute(four, { dp = 4 })
      local r = lw.stepmodel.predict(l, { tokens = TOKENS, machine = m })
      assert.equal(1, #r.buckets)
      assert.near(expect, r.buckets[1].rs.time, 1e-15)
   end)

   it("scales compute when more ranks than cores share a node", function()
      local m = machine(1e8, 0)
      m.cores = 2
      local l = lw.layout.compute(four, { dp = 4 })
      local r = lw.stepmodel.predict(l, { tokens = TOKENS, machine = m })
      assert.equal(0.5, r.share)
      assert.near(2 * COMPUTE, r.compute, 1e-12)
      assert.near(2 * NS / 1e9, r.ranks[1].ns, 1e-12)
   end)

   it("prints a table with every bucket, every rank and the step", function()
      local text = lw.stepmodel.table(lw.stepmodel.predict(layout,
         { tokens = TOKENS, machine = machine(1e8, 0) }))
      assert.matches("step-time model  machine custom  dp 2  ZeRO-1  100 tokens per rank", text, 1,
         true)
      assert.matches("| 2 | 1 muon | 1 | cost |", text, 1, true)
      assert.matches("| 0 (slowest) | 2 | 0.03 | 26.2 | 0.39 | 26.6 |", text, 1, true)
      assert.matches("| **step** |", text, 1, true)
   end)
end)

describe("lw.stepmodel input checks", function()
   local layout = lw.layout.compute(four, { dp = 2 })

   it("names the presets when the machine is unknown", function()
      local ok, err = pcall(lw.stepmodel.predict, layout, { tokens = 1, machine = "dgx" })
      assert.is_false(ok)
      assert.equal("lw.stepmodel: unknown machine 'dgx' (one of a100-node, h100-node, "
         .. "this-machine)", err)
   end)

   it("names the field a machine table is missing", function()
      local link = { bandwidth = 1, latency = 0 }
      local cases = {
         { { model_flops = 1, mem_bandwidth = 1, intra = link },
           "machine 'custom' is missing field 'ns_flops'" },
         { { model_flops = 1, ns_flops = 1, mem_bandwidth = 1, intra = { bandwidth = 1 } },
           "machine 'custom' is missing field 'intra.latency'" },
         { { model_flops = 1, ns_flops = 1, mem_bandwidth = 1, intra = link, inter = link },
           "missing field 'devices_per_node'" },
         { { model_flops = 1, ns_flops = 1, mem_bandwidth = 1, intra = link, latancy = 1 },
           "machine 'custom' has unknown field 'latancy'" },
         { { model_flops = -1, ns_flops = 1, mem_bandwidth = 1, intra = link },
           "model_flops must be a positive number, got -1" },
         { { model_flops = 1, ns_flops = 1, mem_bandwidth = 1, intra = link, variable = "tree" },
           "variable must be one of ring, pipelined, got 'tree'" },
      }
      for _, c in ipairs(cases) do
         local ok, err = pcall(lw.stepmodel.predict, layout, { tokens = 1, machine = c[1] })
         assert.is_false(ok)
         assert.matches(c[2], err, 1, true)
      end
   end)

   it("refuses missing tokens, a bad ZeRO level and unknown options", function()
      local cases = {
         { {}, "tokens (per rank per step) must be a positive number, got nil" },
         { { tokens = 8, zero = 4 }, "zero must be 1, 2 or 3, got 4" },
         { { tokens = 8, batch = 2 }, "unknown option 'batch'" },
      }
      for _, c in ipairs(cases) do
         local ok, err = pcall(lw.stepmodel.predict, layout, c[1])
         assert.is_false(ok)
         assert.matches(c[2], err, 1, true)
      end
      assert.has_error(function() lw.stepmodel.predict({}, { tokens = 1 }) end)
   end)
end)

describe("lw.stepmodel with a mixture of experts", function()
   -- 2 layers x 64, 4 experts of hidden 256 (4 x 64), vocabulary 128, sequence 32, tied
   local cfg = { n_layer = 2, n_embd = 64, n_head = 2, vocab = 128, seq_len = 32, n_expert = 4 }
   local specs = lw.route(lw.arch.gpt(cfg))
   local EXPERTS = 2 * 4 * 2 * 256 * 64 -- every expert matrix: 262,144 elements
   -- what every token passes: the tied head, per layer qkv, proj and the router (4 x 64)
   local DENSE = 128 * 64 + 2 * (3 * 64 * 64 + 64 * 64 + 4 * 64)

   it("counts the experts' forward and backward at topk over the layer's experts", function()
      assert.equal(6 * (DENSE + EXPERTS * 2 / 4), lw.stepmodel.flops_per_token(specs))
      assert.equal(6 * (DENSE + EXPERTS * 1 / 4), lw.stepmodel.flops_per_token(specs, nil, 1))
      assert.equal(6 * (DENSE + EXPERTS), lw.stepmodel.flops_per_token(specs, nil, 4))
      assert.equal(6 * (DENSE + EXPERTS / 2) + 12 * 2 * 64 * 32,
         lw.stepmodel.flops_per_token(specs, { n_layer = 2, n_embd = 64, seq_len = 32 }, 2))
   end)

   it("gives an EP rank's specs (its experts only) the same FLOPs per token", function()
      local rank0 = {}
      for _, s in ipairs(specs) do
         local e = tonumber(s.name:match("experts%.(%d+)%."))
         if e == nil or e < 2 then rank0[#rank0 + 1] = s end
      end
      assert.equal(lw.stepmodel.flops_per_token(specs), lw.stepmodel.flops_per_token(rank0))
   end)

   it("runs Newton-Schulz on every expert matrix while compute counts topk of them", function()
      local layout = lw.layout.compute(specs, { dp = 2 })
      local r = lw.stepmodel.predict(layout, { tokens = TOKENS, machine = machine(1e8, 0),
         topk = 1 })
      assert.near(6 * (DENSE + EXPERTS / 4) * TOKENS / 1e9, r.compute, 1e-12)
      local want, matrices, whole = 0, 0, 0
      for _, s in ipairs(specs) do
         if s.optimizer == "muon" then
            whole = whole + lw.stepmodel.ns_flops(s.shape)
            if s.qkv then -- split_qkv (the library's default): Q, K and V, 64 x 64 each
               want, matrices = want + 3 * lw.stepmodel.ns_flops({ 64, 64 }), matrices + 3
            else
               want, matrices = want + lw.stepmodel.ns_flops(s.shape), matrices + 1
            end
         end
      end
      -- per layer Q, K, V, proj and 4 experts' fc and proj
      assert.equal(2 * (3 + 1 + 4 * 2), matrices)
      local function totals(result)
         local ns, counted = 0, 0
         for _, w in ipairs(result.ranks) do ns, counted = ns + w.ns_flops, counted + w.matrices end
         return ns, counted
      end
      local ns, counted = totals(r)
      assert.equal(want, ns)
      assert.equal(matrices, counted)
      -- split_qkv off: the fused weight is one 192 x 64 matrix, as the library then takes it
      ns, counted = totals(lw.stepmodel.predict(layout, { tokens = TOKENS,
         machine = machine(1e8, 0), topk = 1, muon = { split_qkv = false } }))
      assert.equal(whole, ns)
      assert.equal(matrices - 2 * 2, counted)
      assert.is_true(whole < want)
   end)

   it("refuses an expert it cannot place in a layer, and a bad topk", function()
      local odd = { { name = "blob", shape = { 8, 8 }, role = "expert", expert = true } }
      local ok, err = pcall(lw.stepmodel.flops_per_token, odd)
      assert.is_false(ok)
      assert.matches("expert parameter 'blob' is not named <layer>experts.<index>.<name>", err, 1,
         true)
      ok, err = pcall(lw.stepmodel.flops_per_token, specs, nil, 0)
      assert.is_false(ok)
      assert.matches("topk (experts per token) must be a number >= 1, got 0", err, 1, true)
   end)

   it("takes --topk on the command line", function()
      local argv = { "layout", "--n-layer", "2", "--n-embd", "64", "--n-head", "2", "--vocab",
         "128", "--seq-len", "32", "--n-expert", "4", "--model-step", "--stats" }
      local flops = 6 * (DENSE + EXPERTS / 4) + 12 * 2 * 64 * 32
      argv[#argv + 1], argv[#argv + 2] = "--topk", "1"
      local status, out = run(argv)
      assert.equal(0, status)
      assert.matches(("%.4g GFLOP per token"):format(flops / 1e9), out, 1, true)
   end)
end)

describe("lwopt layout --model-step and --compare", function()
   local model = { "layout", "--n-layer", "2", "--n-embd", "64", "--n-head", "2", "--dp", "4" }
   local function with(...)
      local argv = { unpack(model) }
      for _, a in ipairs({ ... }) do argv[#argv + 1] = a end
      return argv
   end

   it("prints the prediction after the layout, on h100-node when no preset is named", function()
      local status, out = run(with("--model-step", "--tokens", "4096"))
      assert.equal(0, status)
      assert.matches("^layout  dp 4", out)
      assert.matches("step-time model  machine h100-node  dp 4  ZeRO-1  4,096 tokens per rank", out,
         1, true)
      assert.matches("| **step** |", out, 1, true)
      status, out = run(with("--model-step", "this-machine", "--zero", "3"))
      assert.equal(0, status)
      assert.matches("machine this-machine  dp 4  ZeRO-3", out, 1, true)
      assert.matches("all-gathers waited for in backward (ZeRO-3)", out, 1, true)
   end)

   it("charges the passes of --muon-variant nanochat's options", function()
      local status, out = run(with("--model-step", "--muon-variant", "nanochat"))
      assert.equal(0, status)
      assert.matches("with Muon's options' 24 bytes per element orthogonalised; ms)", out, 1, true)
      status, out = run(with("--model-step"))
      assert.equal(0, status)
      assert.not_matches("Muon's options'", out, 1, true)
      -- --compare's predicted steps take them too (this machine's memory bandwidth shows them)
      local plain, nanochat
      status, plain = run(with("--compare", "--model-step", "this-machine"))
      assert.equal(0, status)
      status, nanochat = run(with("--compare", "--model-step", "this-machine", "--muon-variant",
         "nanochat"))
      assert.equal(0, status)
      local function step_ms(text) return tonumber(text:match("\n| cost |.-| ([%d.]+) |  |\n")) end
      assert.is_true(step_ms(nanochat) > step_ms(plain))
   end)

   it("compares every whole-matrix algorithm, one row each", function()
      local status, out = run(with("--compare", "--bucket-size", "10K"))
      assert.equal(0, status)
      assert.matches("compare  machine h100-node  dp 4", out, 1, true)
      for _, a in ipairs({ "cost", "lpt", "size_matching", "packed", "distopt", "rows" }) do
         assert.matches("\n| " .. a .. " | ", out, 1, true)
      end
      assert.not_matches("legend", out, 1, true) -- no map
   end)

   it("counts attention over --seq-len for llama, which has no position table", function()
      local argv = { "layout", "--arch", "llama", "--n-layer", "2", "--n-embd", "64",
         "--n-head", "4", "--mlp-hidden", "128", "--vocab", "100", "--model-step", "--stats" }
      -- 6 per matrix element (per layer qkv and proj 64 x 64 each of Q, K, V, O; fc 256 x 64
      -- (SwiGLU's gate and up) and proj 64 x 128; the LM head 100 x 64) + 12 x n_layer x n_embd
      -- x seq_len of attention
      local n = 2 * (4 * 64 * 64 + 3 * 64 * 128) + 100 * 64
      for _, seq in ipairs({ 1024, 512 }) do -- 1024: the model's default, then --seq-len
         local status, out = run(argv)
         assert.equal(0, status)
         assert.matches(("%.4g GFLOP per token"):format((6 * n + 12 * 2 * 64 * seq) / 1e9), out,
            1, true)
         argv[#argv + 1], argv[#argv + 2] = "--seq-len", "512"
      end
   end)

   it("takes changed machine fields and reports bad ones", function()
      local status, out = run(with("--model-step", "--machine-set",
         "intra.bandwidth=1e9,variable=ring"))
      assert.equal(0, status)
      assert.matches("machine h100-node (changed)", out, 1, true)
      assert.matches("link: 1 GB/s bus", out, 1, true)
      local _, _, err = run(with("--model-step", "--machine-set", "intra.latancy=1"))
      assert.matches("has unknown field 'intra.latancy'", err, 1, true)
      status, _, err = run(with("--model-step", "dgx"))
      assert.equal(2, status)
      assert.matches("--model-step must be one of a100-node|h100-node|this-machine", err, 1, true)
   end)
end)
