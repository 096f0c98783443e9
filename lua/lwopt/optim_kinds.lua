-- optim_kinds.lua: the optimizer rules the library has (lw_optimizer_kind), as lw.optim.kinds:
-- in the enum's order, each { name, value, whole (it updates whole matrices: a matrix's owner
-- needs all of it), parts (its state's part names, as checkpoints store them), lines (the set of
-- parts with one float per line of the matrix, not per element: NorMuon's v) }, and each also
-- under its name. Routing, layouts, checkpoints and reports ask here rather than spelling the
-- rules' names, so a rule added to the library is known to Lua with nothing written here.
local ffi = require("ffi")
local C = require("lwopt.C")
local errors = require("lwopt.errors")

local lib = C.lib
local kinds = {}

for i, name in ipairs(C.names("optimizer_kind")) do
   local value = i - 1
   local parts, lines = {}, {}
   for p = 0, lib.lw_optimizer_kind_parts(value) - 1 do
      parts[#parts + 1] = ffi.string(lib.lw_optimizer_kind_part(value, p))
      if lib.lw_optimizer_kind_part_size(value, p) == lib.LW_PART_LINES then
         lines[parts[#parts]] = true
      end
   end
   local kind = { name = name, value = value, whole = lib.lw_optimizer_kind_whole(value),
                  parts = parts, lines = lines }
   kinds[i] = kind
   kinds[name] = kind
end

-- The rules' names joined for a message: "adamw, muon".
function kinds.list()
   local names = {}
   for i, k in ipairs(kinds) do names[i] = k.name end
   return table.concat(names, ", ")
end

-- The rule named `name`, or an error from `where`: "<what> 'sgd' is not an optimizer rule
-- (one of adamw, muon)".
function kinds.get(name, where, what)
   local k = type(name) == "string" and kinds[name] or nil
   if type(k) ~= "table" then
      errors.fail(where, "%s %s is not an optimizer rule (one of %s)", what or "optimizer",
         type(name) == "string" and ("'" .. name .. "'") or tostring(name), kinds.list())
   end
   return k
end

return kinds
