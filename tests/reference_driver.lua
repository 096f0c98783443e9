-- reference_driver.lua: lwopt's side of tests/reference_compare.py. Reads one JSON document
-- { cases = [ { opts = {...}, specs = [...] } | { divisor = { dp, high_busbw } } ] } from the
-- file arg[1] and prints one JSON line per case: layout:json(), the two divisors, or
-- { error = "..." } when lwopt raises. It computes layouts only; the comparison is in Python.
-- Usage: bin/lwopt run tests/reference_driver.lua CASES.json
local lw = require("lwopt")
local dkjson = require("dkjson")

local path = assert(arg and arg[1], "usage: reference_driver.lua CASES.json")
local f = assert(io.open(path, "rb"))
local text = f:read("*a")
f:close()
local doc, _, err = dkjson.decode(text) -- JSON null decodes to nil
assert(doc, err)

-- Copies a decoded JSON array into a plain Lua array (dkjson tags its arrays with a metatable).
local function array(a)
   local out = {}
   for i = 1, #a do
      out[i] = a[i]
   end
   return out
end

local function compute(case)
   local specs = {}
   for i, s in ipairs(case.specs) do
      specs[i] = {
         name = s.name,
         shape = array(s.shape),
         dtype = s.dtype,
         grad_dtype = s.grad_dtype, -- nil when absent: lwopt's default applies
         expert = s.expert and true or false,
         shared_embedding = s.shared_embedding and true or false,
         optimizer = s.optimizer,
      }
   end
   local o = case.opts
   local opts = {
      dp = o.dp,
      expert_dp = o.expert_dp, -- nil when absent
      bucket_size = o.bucket_size, -- nil when absent or null: no limit
      algorithm = o.algorithm,
      adamw_layout = o.adamw_layout,
      high_busbw = o.high_busbw and true or false,
   }
   return lw.layout.compute(specs, opts):json()
end

local out = {}
for i, case in ipairs(doc.cases) do
   local ok, res
   if case.divisor then
      local d = case.divisor
      ok, res = pcall(function()
         return lw.json.encode({
            bucket_end_divisor = lw.layout.bucket_end_divisor(d.dp, d.high_busbw and true or false),
            shard_divisor = lw.layout.shard_divisor(d.dp, d.high_busbw and true or false),
         })
      end)
   else
      ok, res = pcall(compute, case)
   end
   if not ok then
      res = lw.json.encode({ error = tostring(res) })
   end
   out[i] = res:gsub("\n", " ")
end
io.write(table.concat(out, "\n"), "\n")
