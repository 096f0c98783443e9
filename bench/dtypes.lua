-- dtypes.lua: fp32 against bf16 parameters (fp32 master weights) and bf16 gradient sums, through
-- recipes/gpt_small.lua (small preset, bucket 1M elements) at dp 2 and 4 (4 ranks oversubscribed
-- on 2 cores), ZeRO-1 and ZeRO-3: the bytes each kind of collective moved per step (median of
-- steps 2..N from the JSON log), the memory per rank by kind (the most over ranks, at the last
-- step) and tokens/s. The configurations run interleaved, `repeats` times; each keeps its best
-- tokens/s (the machine's speed moves by tens of percent within minutes); bytes and memory do not
-- change between repeats. Prints a Markdown table, then the bf16 / fp32 ratios.
-- Usage: bin/lwopt run bench/dtypes.lua [--steps N] [--repeats R] [--dps 2,4] [--zeros 1,3]
local flags = require("lwopt.flags")

local v = assert(flags.parse(arg, {
   { "steps", "int", 6, "" }, { "repeats", "int", 2, "" }, { "dps", "string", "2,4", "" },
   { "zeros", "string", "1,3", "" }, { "batch", "int", 8, "" },
}))

local function list(s)
   local out = {}
   for x in s:gmatch("[^,]+") do out[#out + 1] = tonumber(x) end
   return out
end

local tmp = os.tmpname()
os.remove(tmp)

local median = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/recipe_runs.lua").median

local DTYPES = {
   { name = "fp32", args = "--param-dtype fp32" },
   { name = "bf16", args = "--param-dtype bf16" },
   { name = "bf16 + bf16 sums", args = "--param-dtype bf16 --grad-dtype bf16" },
}

local function run(dp, zero, dtype)
   local log = ("%s-%d-%d-%s.jsonl"):format(tmp, dp, zero, dtype.name:gsub("%W", "_"))
   local cmd = ("mpirun --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 luajit "
      .. "recipes/gpt_small.lua --preset small --steps %d --batch %d --eval-every 0 --eval-max %d "
      .. "--sample 0 --quiet --zero %d --bucket-size 1048576 %s --log %s > /dev/null 2>&1")
      :format(dp, v.steps, v.batch, dp, zero, dtype.args, log)
   local ok = os.execute(cmd)
   if ok ~= 0 and ok ~= true then error("failed: " .. cmd) end
   local tps, ops, memory = {}, {}, {}
   local n, lines = 0, {}
   for line in io.lines(log) do
      -- the configuration record that opens the log is not a step's
      if not line:find('"kind":"config"', 1, true) then lines[#lines + 1] = line end
   end
   for _, line in ipairs(lines) do
      n = n + 1
      if n > 1 then
         tps[#tps + 1] = tonumber(line:match('"tokens_per_s":([%d%.eE%-]+)'))
         local by_op = line:match('"comm_mb_by_op":{([^}]*)}') or ""
         for op, mb in by_op:gmatch('"([%w_]+)":([%d%.eE%-]+)') do
            ops[op] = ops[op] or {}
            ops[op][#ops[op] + 1] = tonumber(mb)
         end
      end
      for _, key in ipairs({ "params", "master", "grads", "optimizer", "peak" }) do
         local most = 0
         for x in (line:match('"' .. key .. '":%[([^%]]*)%]') or ""):gmatch("[%d%.]+") do
            most = math.max(most, tonumber(x))
         end
         memory[key] = most
      end
   end
   os.remove(log)
   local out = { tokens_per_s = median(tps), memory = memory, ops = {} }
   for op, xs in pairs(ops) do out.ops[op] = median(xs) end
   return out
end

local configs = {}
for _, dp in ipairs(list(v.dps)) do
   for _, zero in ipairs(list(v.zeros)) do
      for _, dtype in ipairs(DTYPES) do
         configs[#configs + 1] = { dp = dp, zero = zero, dtype = dtype }
      end
   end
end
for _ = 1, v.repeats do
   for _, c in ipairs(configs) do
      local r = run(c.dp, c.zero, c.dtype)
      if c.best == nil or r.tokens_per_s > c.best.tokens_per_s then c.best = r end
   end
end

print("| dp | ZeRO | dtypes | tokens/s | all-gather MiB/step | reduce-scatter MiB/step "
   .. "| all-reduce MiB/step | params MiB | master MiB | grads MiB | optimizer MiB | peak MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
local function ops(r, op) return r.ops[op] or 0 end
for _, c in ipairs(configs) do
   local r, m = c.best, c.best.memory
   print(("| %d | %d | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |"):format(
      c.dp, c.zero, c.dtype.name, r.tokens_per_s, ops(r, "allgather"), ops(r, "reduce_scatter"),
      ops(r, "allreduce"), m.params, m.master, m.grads, m.optimizer, m.peak))
end
print()
print("bf16 / fp32 at the same dp and ZeRO level: all-gather bytes, reduce-scatter bytes, params "
   .. "memory, tokens/s")
for i = 1, #configs, #DTYPES do
   local fp = configs[i].best
   for k = 1, #DTYPES - 1 do
      local c = configs[i + k]
      local r = c.best
      local function ratio(a, b) return b > 0 and a / b or 0 end
      print(("dp %d ZeRO-%d %s: all-gather %.2f, reduce-scatter %.2f, params %.2f, tokens/s %.2f")
         :format(c.dp, c.zero, c.dtype.name, ratio(ops(r, "allgather"), ops(fp, "allgather")),
         ratio(ops(r, "reduce_scatter"), ops(fp, "reduce_scatter")),
         ratio(r.memory.params, fp.memory.params), ratio(r.tokens_per_s, fp.tokens_per_s)))
   end
end
