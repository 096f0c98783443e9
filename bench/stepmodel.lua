-- bench/stepmodel.lua: the step-time model (lw.stepmodel) against this machine. It trains
-- recipes/gpt_small.lua, small preset (cost layout, ZeRO-1, overlap on, one BLAS thread per
-- rank), at dp 2, dp 2 with 1M-element buckets and dp 4 (4 ranks on the 2 cores), and predicts
-- each run from figures measured around it: just before and just after every training run, a
-- probe runs sgemm 1024^3 on one thread (bench_newton_schulz --sgemm-threads 1) and, at the same
-- time on the other core, Newton-Schulz on one thread on the small preset's four matrix shapes
-- (lw_muon_orthogonalize: the library's SYRK path, 5 quintic steps), so both see two busy cores
-- as two training ranks do; the faster of the two probes counts. Each repeat also measures
-- reduce-scatter and all-gather through lw_comm at 2 and 4 ranks (bench_collectives: bus
-- bandwidth at 8 MB per rank, latency from the 8-byte-per-rank sizes). A run's measured step is
-- its median wall time per step over steps 5..N.
-- Not measured here, taken from bench/README.md: the model kernels' share of sgemm over forward
-- + backward (0.72, "Training throughput": 69-77%) and the element-wise optimizer's memory
-- bandwidth (4.8 GB/s, from AdamW's optimizer time there).
-- Usage: bin/lwopt run bench/stepmodel.lua [steps] [repeats]   (from the repo root; 12 and 2 by
-- default, about 2 minutes)
-- bin/lwopt run bench/stepmodel.lua --scale: no measurement, the model's predictions on the
-- h100-node preset for GPT-2 1.5B and LLaMA-8B shapes (as bench/layout.lua builds them, bf16
-- parameters, fp32 gradients) at dp 8, 64, 512 and 4096, cost against packed, 40M buckets,
-- 8192 tokens per rank per step.
local lw = require("lwopt")
local ffi = require("ffi")
local C = require("lwopt.C")
local dkjson = require("dkjson")

local probe = arg[1] == "--ns-probe" -- internal: print Newton-Schulz's rate and exit

if arg[1] == "--scale" then
   local models = {
      { "GPT-2 1.5B", lw.arch.gpt{ n_layer = 48, n_embd = 1600, n_head = 25, dtype = "bf16" },
        { n_layer = 48, n_embd = 1600, seq_len = 1024 } },
      { "LLaMA 8B", lw.models.specs("llama", { n_layer = 32, n_embd = 4096, n_head = 32,
        n_kv_head = 8, mlp_hidden = 14336, vocab = 128256, dtype = "bf16" }),
        { n_layer = 32, n_embd = 4096, seq_len = 8192 } },
   }
   local ring = lw.stepmodel.machine("h100-node")
   ring.variable = "ring"
   print("| model | dp | layout | Muon buckets | Muon padding | MB sent per rank | "
      .. "Newton-Schulz ms | forward + backward ms | exposed comm ms | step ms | step ms, "
      .. "unequal shards as lock-step rings |")
   print("|---|---|---|---|---|---|---|---|---|---|---|")
   for _, m in ipairs(models) do
      local flops = lw.stepmodel.flops_per_token(m[2], m[3])
      for _, dp in ipairs({ 8, 64, 512, 4096 }) do
         for _, algorithm in ipairs({ "cost", "packed" }) do
            local l = lw.layout.compute(m[2], { dp = dp, bucket_size = 40e6,
               algorithm = algorithm })
            local r = lw.stepmodel.predict(l, { tokens = 8192, model = flops,
               machine = "h100-node" })
            local r_ring = lw.stepmodel.predict(l, { tokens = 8192, model = flops, machine = ring })
            local s, buckets = l:stats(), 0
            for _, b in ipairs(l.buffers) do
               if b.key.whole then buckets = buckets + #b.buckets end
            end
            print(("| %s | %d | %s | %d | %.1f%% | %.0f | %.2f | %.0f | %.1f | %.0f | %.0f |")
               :format(m[1], dp, algorithm, buckets, 100 * s.muon_overhead, r.wire_bytes / 1e6,
                  1e3 * r.ranks[r.slowest + 1].ns, 1e3 * r.compute, 1e3 * r.exposed.total,
                  1e3 * r.step, 1e3 * r_ring.step))
         end
      end
   end
   os.exit(0)
end
local steps = tonumber(arg[1]) or 12
local repeats = tonumber(arg[2]) or 2
local FIRST = 5 -- steps before this one are warm-up
local EFFICIENCY, MEM_BANDWIDTH, CORES = 0.72, 4.8e9, 2
local L, E, H, T, V, B = 6, 256, 8, 128, 256, 8 -- the small preset on bytes

-- Newton-Schulz must run on one thread, as each rank's does: rerun under OPENBLAS_NUM_THREADS=1.
if os.getenv("OPENBLAS_NUM_THREADS") ~= "1" and not probe then
   local cmd = ("OPENBLAS_NUM_THREADS=1 bin/lwopt run %s %d %d"):format(arg[0], steps, repeats)
   local ok = os.execute(cmd)
   os.exit((ok == 0 or ok == true) and 0 or 1)
end

local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
   .. "--oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 "

local function capture(cmd)
   local pipe = assert(io.popen(cmd))
   local text = pipe:read("*a")
   local ok = pipe:close()
   assert(ok == true or ok == 0, "failed: " .. cmd)
   return text
end


-- The small preset's Muon shapes, one of each per layer: qkv, attn.proj, mlp.fc, mlp.proj.
local SHAPES = { { 3 * E, E }, { E, E }, { 4 * E, E }, { E, 4 * E } }

-- Newton-Schulz's rate in full-GEMM FLOPs per second over the four shapes (best of 3 each).
local function newton_schulz()
   local opts = ffi.new("lw_muon_options[1]", C.lib.lw_muon_defaults())
   local out = ffi.new("lw_muon*[1]")
   C.check(C.lib.lw_muon_new(opts, out), "bench")
   local muon = ffi.gc(out[0], C.lib.lw_muon_free)
   local flops, seconds = 0, 0
   for _, s in ipairs(SHAPES) do
      local n = s[1] * s[2]
      local u, x = ffi.new("float[?]", n), ffi.new("float[?]", n)
      for i = 0, n - 1 do u[i] = ((i * 2654435761) % 1000) / 500 - 1 end
      local best = math.huge
      for k = 0, 3 do
         local t0 = lw.now()
         C.check(C.lib.lw_muon_orthogonalize(muon, nil, u, x, s[1], s[2]), "bench")
         if k > 0 then best = math.min(best, lw.now() - t0) end -- k = 0 warms up
      end
      flops, seconds = flops + lw.stepmodel.ns_flops(s), seconds + best
   end
   return flops / seconds
end

-- Bus bandwidths (bytes/s) of reduce-scatter and all-gather at 8 MB per rank and the latency per
-- ring step (s, the smaller of the two at 8 bytes per rank), at p ranks.
local function collectives(p)
   local text = capture(MPIRUN:format(p) .. "build/bench_collectives 100")
   local found = {}
   for line in text:gmatch("[^\n]+") do
      -- size count type op time algbw busbw #wrong
      local size, us, busbw = line:match(
         "^%s+(%d+)%s+%d+%s+float%s+%S+%s+([%d%.]+)%s+[%d%.]+%s+([%d%.]+)")
      local op = line:match("float%s+(%S+)")
      if size then
         found[op] = found[op] or {}
         found[op][tonumber(size)] = { us = tonumber(us), busbw = tonumber(busbw) * 1e9 }
      end
   end
   local small, large = 8 * p, 8 * 2 ^ 20 * p
   local rs, ag = found["reduce-scatter"], found["all-gather"]
   assert(rs and ag and rs[large] and ag[large] and rs[small] and ag[small],
      "bench_collectives said:\n" .. text)
   return { rs = rs[large].busbw, ag = ag[large].busbw,
            latency = math.min(rs[small].us, ag[small].us) * 1e-6 / (p - 1) }
end

if probe then
   print(("%.6g"):format(newton_schulz()))
   os.exit(0)
end

-- sgemm on one core and Newton-Schulz on the other, at the same time: { sgemm, ns } in FLOP/s.
local function probe_rates()
   local a, b = os.tmpname(), os.tmpname()
   local ok = os.execute(("build/bench_newton_schulz 5 --sgemm-threads 1 > %s & "
      .. "OPENBLAS_NUM_THREADS=1 bin/lwopt run %s --ns-probe > %s & wait"):format(a, arg[0], b))
   assert(ok == 0 or ok == true, "the probe failed")
   local function read(path)
      local f = assert(io.open(path))
      local v = tonumber(f:read("*a"))
      f:close()
      os.remove(path)
      return assert(v, "the probe printed no number")
   end
   return { sgemm = read(a) * 1e9, ns = read(b) }
end

local CONFIGS = {
   { dp = 2, name = "dp 2" },
   { dp = 2, bucket = 1e6, name = "dp 2, 1M buckets" },
   { dp = 4, name = "dp 4 (oversubscribed)" },
}

local function median(list)
   local t = { unpack(list) }
   table.sort(t)
   local n = #t
   return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end

-- One training run: medians over steps FIRST..N of the step's wall time and its parts (s).
local function train(c)
   local log = os.tmpname() .. ".jsonl"
   local cmd = (MPIRUN .. "luajit recipes/gpt_small.lua --steps %d --sample 0 --quiet "
      .. "--eval-every 0 --eval-max 1 --log %s%s > /dev/null"):format(c.dp, steps, log,
      c.bucket and (" --bucket-size %d"):format(c.bucket) or "")
   local ok = os.execute(cmd)
   assert(ok == 0 or ok == true, "failed: " .. cmd)
   local parts = { step = {}, fwd = {}, bwd = {}, comm_wait = {}, opt = {}, muon = {} }
   for line in io.lines(log) do
      local r = dkjson.decode(line)
      if r.kind ~= "config" and r.step >= FIRST then
         parts.step[#parts.step + 1] = B * T * c.dp / r.tokens_per_s
         for _, k in ipairs({ "fwd", "bwd", "comm_wait", "opt", "muon" }) do
            parts[k][#parts[k] + 1] = r.time_ms[k] / 1e3
         end
      end
   end
   os.remove(log)
   os.remove((log:gsub("%.jsonl$", ".png")))
   local m = {}
   for k, v in pairs(parts) do m[k] = median(v) end
   return m
end

local specs = lw.route(lw.arch.gpt{ n_layer = L, n_embd = E, n_head = H, vocab = V, seq_len = T,
   tied = true })
local flops_per_token = lw.stepmodel.flops_per_token(specs,
   { n_layer = L, n_embd = E, seq_len = T })

local function predict(c, rates, coll)
   local machine = lw.stepmodel.cpu_machine{ sgemm = rates.sgemm, model_efficiency = EFFICIENCY,
      ns_ratio = rates.ns / rates.sgemm, mem_bandwidth = MEM_BANDWIDTH, rs_bandwidth = coll.rs,
      ag_bandwidth = coll.ag, latency = coll.latency, cores = CORES }
   local layout = lw.layout.compute(specs, { dp = c.dp, bucket_size = c.bucket,
      algorithm = "cost" })
   return lw.stepmodel.predict(layout, { tokens = B * T, model = flops_per_token,
      machine = machine })
end

local rows, inputs = {}, {}
for rep = 1, repeats do
   local coll = { [2] = collectives(2), [4] = collectives(4) }
   inputs[rep] = coll
   for _, c in ipairs(CONFIGS) do
      local before = probe_rates()
      local measured = train(c)
      local after = probe_rates()
      -- a disturbance only slows a probe down: keep the faster of the two, as the other
      -- benchmarks keep their best repeat
      local rates = { sgemm = math.max(before.sgemm, after.sgemm),
                      ns = math.max(before.ns, after.ns) }
      rows[#rows + 1] = { rep = rep, config = c, measured = measured, rates = rates,
         predicted = predict(c, rates, coll[c.dp]) }
   end
end

print(("model: %.1f MFLOP per token (forward + backward, attention included); %d steps per run, "
   .. "medians of steps %d..%d"):format(flops_per_token / 1e6, steps, FIRST, steps))
print("| repeat | dp | reduce-scatter busbw GB/s | all-gather busbw GB/s | latency us |")
print("|---|---|---|---|---|")
for rep, coll in ipairs(inputs) do
   for _, p in ipairs({ 2, 4 }) do
      local c = coll[p]
      print(("| %d | %d | %.3f | %.3f | %.2f |"):format(rep, p, c.rs / 1e9, c.ag / 1e9,
         c.latency * 1e6))
   end
end
print()
print("| repeat | run | sgemm GFLOP/s | NS GFLOP/s | measured step ms | predicted ms | "
   .. "predicted / measured | measured fwd + bwd | predicted fwd + bwd | measured comm wait | "
   .. "predicted exposed comm | measured opt (of it muon) | predicted optimizer |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
local worst = 0
for _, r in ipairs(rows) do
   local m, p = r.measured, r.predicted
   local ratio = p.step / m.step
   worst = math.max(worst, math.abs(ratio - 1))
   print(("| %d | %s | %.1f | %.1f | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f | %.0f | "
      .. "%.0f (%.0f) | %.0f |"):format(r.rep, r.config.name, r.rates.sgemm / 1e9,
      r.rates.ns / 1e9, 1e3 * m.step, 1e3 * p.step, ratio, 1e3 * (m.fwd + m.bwd),
      1e3 * (p.forward + p.backward), 1e3 * m.comm_wait, 1e3 * p.exposed.total, 1e3 * m.opt,
      1e3 * m.muon, 1e3 * p.optimizer))
end
print(("\nlargest |predicted / measured - 1| = %.2f (goal <= 0.30)"):format(worst))
