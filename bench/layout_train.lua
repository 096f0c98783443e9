-- bench/layout_train.lua: CPU training throughput of the packed layout against cost (the
-- Megatron-equivalent default) through recipes/gpt_small.lua (small preset, Muon layer-wise,
-- ZeRO-1, 1M-element buckets so that the small model has several), at
-- dp 2 and dp 4 (4 ranks oversubscribe this 2-core machine), interleaved, each configuration's
-- best of `repeats` runs: tokens/s, Muon and total MiB communicated per step (the comm
-- counters), exposed communication and optimizer ms (means over steps 6..N of the JSON log).
-- Usage: bin/lwopt run bench/layout_train.lua [steps] [repeats]   (from the repo root)
local dkjson = require("dkjson")

local steps = tonumber(arg[1]) or 20
local repeats = tonumber(arg[2]) or 3
local layouts = { "cost", "packed" }
local dps = { 2, 4 }

local function run(dp, layout)
   local log = os.tmpname() .. ".jsonl"
   local cmd = ("mpirun --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 luajit "
      .. "recipes/gpt_small.lua --preset small --steps %d --layout %s --bucket-size 1M "
      .. "--sample 0 --quiet --eval-every 0 --eval-max 1 --log %s > /dev/null 2>&1")
      :format(dp, steps, layout, log)
   local ok = os.execute(cmd)
   assert(ok == 0 or ok == true, "failed: " .. cmd)
   local sum, n = { tps = 0, comm_mb = 0, comm_wait = 0, opt = 0 }, 0
   for line in io.lines(log) do
      local r = dkjson.decode(line)
      if r.step > 5 then
         n = n + 1
         sum.tps = sum.tps + r.tokens_per_s
         sum.comm_mb = sum.comm_mb + r.comm_mb
         sum.comm_wait = sum.comm_wait + r.time_ms.comm_wait
         sum.opt = sum.opt + r.time_ms.opt
      end
   end
   os.remove(log)
   os.remove((log:gsub("%.jsonl$", ".png")))
   for k, v in pairs(sum) do sum[k] = v / n end
   return sum
end

local best = {}
for _ = 1, repeats do
   for _, dp in ipairs(dps) do
      for _, layout in ipairs(layouts) do
         local key = dp .. layout
         local r = run(dp, layout)
         if best[key] == nil or r.tps > best[key].tps then best[key] = r end
      end
   end
end
print(("small preset, %d steps, best of %d interleaved runs; means over steps 6..%d")
   :format(steps, repeats, steps))
print("| dp | layout | tokens/s | vs cost | MiB communicated / step | exposed comm ms | opt ms |")
print("|---|---|---|---|---|---|---|")
for _, dp in ipairs(dps) do
   for _, layout in ipairs(layouts) do
      local r, c = best[dp .. layout], best[dp .. "cost"]
      print(("| %d | %s | %.0f | %.3f | %.2f | %.1f | %.1f |"):format(dp, layout, r.tps,
         r.tps / c.tps, r.comm_mb, r.comm_wait, r.opt))
   end
end
