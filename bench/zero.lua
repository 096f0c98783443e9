-- zero.lua: ZeRO levels through recipes/gpt_small.lua: for each model preset and rank
-- count, ZeRO 1, 2, 3 and row-sharded ZeRO-3, each with Muon and with AdamW; prints a Markdown
-- table of tokens/s, the step time and its parts, bytes communicated per step and peak memory
-- per rank, then the ratios the goals are stated in.
-- Usage: bin/lwopt run bench/zero.lua [--presets small,wide] [--dps 2,4] [--steps N]
--        [--batch B] [--wide-batch B] [--bucket N] [--wide-bucket N] [--levels 1,2,3,rows]
-- Buckets are the unit ZeRO-3 gathers: with one bucket per buffer it would gather everything.
local flags = require("lwopt.flags")

local v = assert(flags.parse(arg, {
   { "presets", "string", "small,wide", "" }, { "dps", "string", "2,4", "" },
   { "steps", "int", 6, "" }, { "batch", "int", 8, "" }, { "wide-batch", "int", 2, "" },
   { "wide-steps", "int", 3, "" }, { "bucket", "int", 1048576, "" },
   { "wide-bucket", "int", 16777216, "" }, { "levels", "string", "1,2,3,rows", "" },
}))

local function list(s)
   local out = {}
   for x in s:gmatch("[^,]+") do out[#out + 1] = x end
   return out
end

local tmp = os.tmpname()
os.remove(tmp)

-- The median of the steps after the first (which allocates and warms up).
local function median(xs)
   table.sort(xs)
   local n = #xs
   return n % 2 == 1 and xs[(n + 1) / 2] or (xs[n / 2] + xs[n / 2 + 1]) / 2
end

local function run(preset, dp, zero, optimizer, batch, steps, bucket)
   local log = ("%s-%s-%d-%s-%s.jsonl"):format(tmp, preset, dp, zero, optimizer)
   local zero_args = zero == "rows" and "--zero 3 --shard rows" or ("--zero " .. zero)
   local cmd = ("mpirun --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 luajit "
      .. "recipes/gpt_small.lua --preset %s --steps %d --batch %d --eval-every 0 --eval-max %d "
      .. "--sample 0 --quiet --optimizer %s %s --bucket-size %d --log %s > /dev/null 2>&1"):format(
      dp, preset, steps, batch, dp, optimizer, zero_args, bucket, log)
   local ok = os.execute(cmd)
   if ok ~= 0 and ok ~= true then error("failed: " .. cmd) end
   local step, fwd, bwd, opt, wait, muon, muon_comm, comm = {}, {}, {}, {}, {}, {}, {}, {}
   local peak, pg = 0, 0
   local tokens = batch * 128 * dp
   local n = 0
   for line in io.lines(log) do
      -- the configuration record is not a step; the first step (n 1) is left out of the medians
      local step_line = not line:find('"kind":"config"', 1, true)
      if step_line then n = n + 1 end
      local function num(key) return tonumber(line:match('"' .. key .. '":([%d%.eE%-]+)')) end
      if step_line and n > 1 then
         step[#step + 1] = 1e3 * tokens / num("tokens_per_s")
         fwd[#fwd + 1], bwd[#bwd + 1], opt[#opt + 1] = num("fwd"), num("bwd"), num("opt")
         wait[#wait + 1], muon[#muon + 1] = num("comm_wait"), num("muon")
         muon_comm[#muon_comm + 1], comm[#comm + 1] = num("muon_comm"), num("comm_mb")
      end
      for x in (line:match('"peak":%[([^%]]*)%]') or ""):gmatch("[%d%.]+") do
         peak = math.max(peak, tonumber(x))
      end
      local p = line:match('"params":%[([%d%.]+)')
      local g = line:match('"grads":%[([%d%.]+)')
      if p and g then pg = math.max(pg, tonumber(p) + tonumber(g)) end
   end
   os.remove(log)
   os.remove((log:gsub("%.jsonl$", ".png")))
   return { step = median(step), fwd = median(fwd), bwd = median(bwd), opt = median(opt),
            wait = median(wait), muon = median(muon), muon_comm = median(muon_comm),
            comm = median(comm), peak = peak, pg = pg, tokens = tokens }
end

print("| model | dp | ZeRO | optimizer | tokens/s | step ms | fwd | bwd | opt | comm wait | "
   .. "Muon (of it gathers) | comm MiB/step | params+grads MiB | peak MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
local results = {}
for _, preset in ipairs(list(v.presets)) do
   for _, dp in ipairs(list(v.dps)) do
      dp = tonumber(dp)
      for _, zero in ipairs(list(v.levels)) do
         for _, optimizer in ipairs({ "muon", "adamw" }) do
            local wide = preset == "wide"
            local r = run(preset, dp, zero, optimizer, wide and v.wide_batch or v.batch,
               wide and v.wide_steps or v.steps, wide and v.wide_bucket or v.bucket)
            results[table.concat({ preset, dp, zero, optimizer }, "/")] = r
            print(("| %s | %d | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f (%.0f) | "
               .. "%.1f | %.1f | %.1f |"):format(preset, dp, zero == "rows" and "3 rows" or zero,
               optimizer, 1e3 * r.tokens / r.step, r.step, r.fwd, r.bwd, r.opt, r.wait, r.muon,
               r.muon_comm, r.comm, r.pg, r.peak))
            io.stdout:flush()
         end
      end
   end
end

print()
print("| model | dp | ZeRO-3 Muon step minus its Muon compute / ZeRO-3 AdamW step | "
   .. "row-sharded / aligned ZeRO-3 Muon step | comm MiB/step aligned vs rows |")
print("|---|---|---|---|---|")
for _, preset in ipairs(list(v.presets)) do
   for _, dp in ipairs(list(v.dps)) do
      local function get(zero, opt) return results[table.concat({ preset, dp, zero, opt }, "/")] end
      local m3, a3, rows = get("3", "muon"), get("3", "adamw"), get("rows", "muon")
      if m3 and a3 then
         local beyond = (m3.step - (m3.muon - m3.muon_comm)) / a3.step
         print(("| %s | %s | %.2f | %s | %s |"):format(preset, dp, beyond,
            rows and ("%.2f"):format(rows.step / m3.step) or "-",
            rows and ("%.1f vs %.1f"):format(m3.comm, rows.comm) or "-"))
      end
   end
end
