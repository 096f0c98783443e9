-- bench/layout_train.lua: CPU training throughput of the packed layout against cost (the
-- Megatron-equivalent default) through recipes/gpt_small.lua (small preset, Muon layer-wise,
-- ZeRO-1, 1M-element buckets so that the small model has several), at
-- dp 2 and dp 4 (4 ranks oversubscribe this 2-core machine), interleaved, each configuration's
-- best of `repeats` runs: tokens/s, Muon and total MiB communicated per step (the comm
-- counters), exposed communication and optimizer ms (means over steps 6..N of the JSON log).
-- Usage: bin/lwopt run bench/layout_train.lua [steps] [repeats]   (from the repo root)
local runs = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/recipe_runs.lua")

local steps = tonumber(arg[1]) or 20
local repeats = tonumber(arg[2]) or 3
local layouts = { "cost", "packed" }
local dps = { 2, 4 }

local function run(dp, layout)
   local records = runs.run{ ranks = dp, quiet = true, args = ("--preset small --steps %d "
      .. "--layout %s --bucket-size 1M --eval-every 0 --eval-max 1"):format(steps, layout) }
   return runs.mean(records, 6, { tps = "tokens_per_s", comm_mb = "comm_mb",
      comm_wait = "time_ms.comm_wait", opt = "time_ms.opt" })
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
