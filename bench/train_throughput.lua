-- bench/train_throughput.lua: tokens/s of recipes/gpt_small.lua (small preset) at dp 1 with 2
-- BLAS threads and dp 2 with 1 each, for muon-layerwise, muon-legacy, muon-replicated and
-- adamw, with the step split into forward, backward, exposed communication and optimizer (mean
-- over steps 6..N of each run's JSON log), the model's achieved GFLOP/s over forward+backward,
-- and the Newton-Schulz share of the step's FLOPs.
-- The machine's speed moves by tens of percent within minutes, so the configurations run
-- interleaved, `repeats` times, and each keeps its best run (highest tokens/s).
-- Usage: bin/lwopt run bench/train_throughput.lua [steps] [repeats]   (from the repo root)
-- With --baseline DIR (a built checkout of another commit): dp 2 only, every configuration run
-- alternately from this tree and from DIR, and the two tables with their ratio, so that a change
-- is judged against the code before it on the same machine at the same time.
local runs = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/recipe_runs.lua")

local baseline
for i = #arg - 1, 1, -1 do
   if arg[i] == "--baseline" then baseline = table.remove(arg, i + 1); table.remove(arg, i) end
end
local steps = tonumber(arg[1]) or 30
local repeats = tonumber(arg[2]) or 3
local L, C, T, V, B = 6, 256, 128, 256, 8 -- the small preset

-- FLOPs of forward + backward per token (6 per multiply-add of the linears and the head; the
-- attention GEMMs run over the full t x t square: 4 T C forward, twice that backward).
local model_flops_per_token = L * (6 * 12 * C * C + 12 * T * C) + 6 * V * C
-- Newton-Schulz FLOPs per step over all matrices, full-GEMM count (4 m^2 n + 2 m^3 per step, 5).
local function ns(m, n) return 5 * (4 * m * m * n + 2 * m * m * m) end
local ns_flops = L * (ns(C, 3 * C) + ns(C, C) + 2 * ns(C, 4 * C))

-- sgemm on this machine now, for the efficiency column
local function sgemm(threads)
   local pipe = assert(io.popen("build/bench_newton_schulz 5 --sgemm-threads " .. threads))
   local v = tonumber(pipe:read("*a"))
   pipe:close()
   return v
end
local sgemm_rate = { [1] = sgemm(2), [2] = sgemm(1) } -- by dp: threads per rank 2, 1

local configs = {
   { "muon", "layerwise" }, { "muon", "legacy" }, { "muon", "replicated" }, { "adamw", "layerwise" },
}

-- One run: means over steps 6..N of its log (root: a checkout to run it in, for --baseline).
local function run(dp, optimizer, mode, root)
   local records = runs.run{ ranks = dp, threads = dp == 1 and 2 or 1, root = root,
      args = ("--steps %d --optimizer %s --mode %s --eval-every 0 --eval-max 1"):format(steps,
         optimizer, mode) }
   return runs.mean(records, 6, { tps = "tokens_per_s", fwd = "time_ms.fwd", bwd = "time_ms.bwd",
      comm_wait = "time_ms.comm_wait", opt = "time_ms.opt" })
end

if baseline then
   local here, there = {}, {}
   for _ = 1, repeats do
      for _, c in ipairs(configs) do
         for _, side in ipairs({ { here, nil }, { there, baseline } }) do
            local r = run(2, c[1], c[2], side[2])
            local key = c[1] .. c[2]
            if side[1][key] == nil or r.tps > side[1][key].tps then side[1][key] = r end
         end
      end
   end
   print(("dp 2, best of %d interleaved runs of %d steps; baseline %s"):format(repeats, steps,
      baseline))
   print("| optimizer | mode | tokens/s this tree | tokens/s baseline | ratio | opt ms this | "
      .. "opt ms baseline |")
   print("|---|---|---|---|---|---|---|")
   for _, c in ipairs(configs) do
      local a, b = here[c[1] .. c[2]], there[c[1] .. c[2]]
      print(("| %s | %s | %.0f | %.0f | %.3f | %.0f | %.0f |"):format(c[1], c[2], a.tps, b.tps,
         a.tps / b.tps, a.opt, b.opt))
   end
   os.exit(0)
end

print(("model: %.1f MFLOP per token (forward + backward); Newton-Schulz %.1f GFLOP per step "
   .. "(all matrices)"):format(model_flops_per_token / 1e6, ns_flops / 1e9))
print(("sgemm 1024^3: %.1f GFLOP/s on 2 threads (dp 1), %.1f on 1 thread (dp 2, per rank)")
   :format(sgemm_rate[1], sgemm_rate[2]))
print("| dp | optimizer | mode | tokens/s | fwd ms | bwd ms | exposed comm ms | opt ms | "
   .. "model GFLOP/s per rank | of sgemm |")
print("|---|---|---|---|---|---|---|---|---|---|")
local results = {}
for _ = 1, repeats do
   for _, dp in ipairs({ 1, 2 }) do
      for _, c in ipairs(configs) do
         local key = dp .. c[1] .. c[2]
         local r = run(dp, c[1], c[2])
         if results[key] == nil or r.tps > results[key].tps then results[key] = r end
      end
   end
end
for _, dp in ipairs({ 1, 2 }) do
   for _, c in ipairs(configs) do
      local r = results[dp .. c[1] .. c[2]]
      local tokens = B * T -- per rank per step
      local rate = model_flops_per_token * tokens / ((r.fwd + r.bwd) / 1e3) / 1e9
      print(("| %d | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.0f%% |"):format(dp, c[1],
         c[2], r.tps, r.fwd, r.bwd, r.comm_wait, r.opt, rate, 100 * rate / sgemm_rate[dp]))
   end
end
local lw, rep, adamw = results["2muonlayerwise"], results["2muonreplicated"], results["2adamwlayerwise"]
local step_flops = model_flops_per_token * B * T + ns_flops / 2 -- per rank at dp 2
local share = (ns_flops / 2) / step_flops
print(("\ndp 2: layer-wise / replicated tokens/s = %.2f (goal >= 1.10)"):format(lw.tps / rep.tps))
print(("dp 2: layer-wise slowdown against adamw = %.2f; Newton-Schulz share of the step's FLOPs "
   .. "= %.2f; ratio %.2f (goal <= 1.25)"):format(adamw.tps / lw.tps - 1, share,
   (adamw.tps / lw.tps - 1) / share))
