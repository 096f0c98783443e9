-- bench/recipe_runs.lua: what the benchmarks that train share: one run of recipes/gpt_small.lua
-- (under mpirun from 2 ranks) with a JSON log, the log read back as records, means and medians
-- of record fields over the steps after warm-up, and the best and the median of repeated runs.
-- It measures nothing itself. Used by bench/train_throughput.lua, bench/layout_train.lua,
-- bench/moe.lua and bench/models.lua (bench/peers.lua, bench/peer_runs.lua and bench/tp_modes.lua
-- take its median):
--    local runs = dofile("bench/recipe_runs.lua")   -- from the repo root, as the scripts run
local dkjson = require("dkjson")

local runs = {}

-- mpirun as root needs these; they change nothing for another user.
local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
   .. "-np %d -x OPENBLAS_NUM_THREADS=%d "

-- The shell command of one run: opts = { ranks = 2, threads = 1 (BLAS threads per rank), args =
-- the recipe's flags (a string), log = path, root = a checkout to run in (default: here),
-- recipe = "recipes/gpt_small.lua", wrap = a command each rank's luajit runs under (e.g. one
-- that measures it) }. Its output is discarded (stderr too with quiet = true).
function runs.command(opts)
   local ranks, threads = opts.ranks or 2, opts.threads or 1
   local launcher = ranks == 1 and ("OPENBLAS_NUM_THREADS=%d "):format(threads)
      or MPIRUN:format(ranks, threads)
   return ("%s%s%sluajit %s %s --sample 0 --quiet --log %s > /dev/null%s"):format(
      opts.root and ("cd %s && "):format(opts.root) or "", launcher,
      opts.wrap and opts.wrap .. " " or "", opts.recipe or "recipes/gpt_small.lua",
      opts.args or "", opts.log, opts.quiet and " 2>&1" or "")
end

-- Runs the recipe once (runs.command's opts, without log) and returns its log's step records,
-- one decoded table per step in order, the command, and the log's configuration record (the
-- model, its parameter count, the flags); the log, its loss curve and the temporary name are
-- removed.
-- A failed run is an error naming its command; with opts.any_status its exit status is not
-- asked (a run that trained but could not draw its loss curve, on a machine without gnuplot,
-- exits 1): the caller counts the records.
function runs.run(opts)
   local name = os.tmpname()
   local o = {}
   for k, v in pairs(opts) do o[k] = v end
   o.log = name .. ".jsonl"
   local cmd = runs.command(o)
   local ok = os.execute(cmd)
   ok = ok == 0 or ok == true or opts.any_status
   local records, config = {}, nil
   local log = ok and io.open(o.log) -- none when a run ended before its first record
   if log then
      for line in log:lines() do
         local rec = dkjson.decode(line)
         if rec.kind ~= "config" then records[#records + 1] = rec else config = rec end
      end
      log:close()
   end
   os.remove(o.log)
   os.remove(name .. ".png")
   os.remove(name)
   assert(ok, "failed: " .. cmd)
   return records, cmd, config
end

-- A record's value at a path: "tokens_per_s", "time_ms.fwd", "by_rank.muon_ms.2" (a list's
-- 1-based index), or a function(rec) -> number.
function runs.field(rec, path)
   if type(path) == "function" then return path(rec) end
   local v = rec
   for part in path:gmatch("[^%.]+") do
      if type(v) ~= "table" then return nil end
      v = v[tonumber(part) or part]
   end
   return v
end

local function collect(records, first, path)
   local out = {}
   for _, rec in ipairs(records) do
      if rec.step >= first then
         local v = runs.field(rec, path)
         if type(v) ~= "number" then
            error(("recipe_runs: step %d has no number at '%s'"):format(rec.step, tostring(path)))
         end
         out[#out + 1] = v
      end
   end
   assert(#out > 0, "recipe_runs: no step from " .. first)
   return out
end

-- The median of a list of numbers (a sorted copy's middle).
function runs.median(list)
   local t = { unpack(list) }
   table.sort(t)
   local n = #t
   return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end

-- Means over the records from step `first` on: fields = { name = path, .. } (runs.field's
-- paths) -> { name = mean, .. }.
function runs.mean(records, first, fields)
   local out = {}
   for name, path in pairs(fields) do
      local sum, list = 0, collect(records, first, path)
      for _, v in ipairs(list) do sum = sum + v end
      out[name] = sum / #list
   end
   return out
end

-- The same with medians.
function runs.medians(records, first, fields)
   local out = {}
   for name, path in pairs(fields) do out[name] = runs.median(collect(records, first, path)) end
   return out
end

-- Of results (tables, one per repeat of a configuration), the one with the highest `key`.
function runs.best(results, key)
   local best
   for _, r in ipairs(results) do
      if best == nil or r[key] > best[key] then best = r end
   end
   return best
end

return runs
