-- weights.lua: a safetensors file of a model's weights, read by name as fp32 host arrays
-- (F32 as it is, BF16 and F16 widened exactly) and checked against the tensors a model expects
-- (every name there, no other, each shape and dtype right), with one-line messages that name
-- the file, the tensor and the problem. Used by `lwopt export` and the recipe's --init-from.
local ffi = require("ffi")
local bit = require("bit")
local safetensors = require("lwopt.safetensors")
local files = require("lwopt.files")
local errors = require("lwopt.errors")

local weights = {}

-- The metadata key under which --save-params records the model's settings (a JSON object: the
-- shape, heads and vocabulary, as in a checkpoint manifest's `extra`), so that a file without
-- its checkpoint still says what `lwopt export` needs.
weights.SETTINGS_KEY = "lwopt.settings"

-- The stored dtypes read, each widened to fp32 exactly.
weights.DTYPES = { F32 = true, BF16 = true, F16 = true }

-- Elements of a shape (lw.tp's count: one definition for the whole front end).
local numel = require("lwopt.tp").numel
weights.numel = numel

local function shape_text(shape) return "{" .. table.concat(shape, ", ") .. "}" end
weights.shape_text = shape_text

-- The file at path, open, as { path, st, shapes = name -> shape, dtypes = name -> dtype, order =
-- the names in the file's order }; errors start with `where`.
function weights.open(path, where)
   local kind = files.kind(path)
   if kind ~= "file" then
      errors.fail(where, "%s", kind == "missing" and "no such file"
         or "not a file (a safetensors file of weights is wanted)")
   end
   local ok, st = pcall(safetensors.open, path, where)
   if not ok then
      -- the C reader's message names the file, which `where` already does
      local why = tostring(st):gsub("^" .. where:gsub("%p", "%%%0") .. ": safetensors: ", "")
      why = why:gsub("^" .. path:gsub("%p", "%%%0") .. ": ", "")
      errors.fail(where, "not a readable safetensors file (%s)", why)
   end
   local f = { path = path, st = st, shapes = {}, dtypes = {}, order = safetensors.names(st) }
   for _, name in ipairs(f.order) do
      local view = safetensors.find(st, name)
      local shape = {}
      for d = 0, view.ndim - 1 do shape[d + 1] = tonumber(view.shape[d]) end
      f.shapes[name], f.dtypes[name] = shape, ffi.string(view.dtype)
   end
   return f
end

-- F16 bits -> the number, exactly (every half is a float).
local function half(h)
   local sign = bit.band(h, 0x8000) ~= 0 and -1 or 1
   local e, m = bit.band(bit.rshift(h, 10), 0x1f), bit.band(h, 0x3ff)
   if e == 0 then return sign * m * 2 ^ -24 end
   if e == 31 then return m == 0 and sign * math.huge or 0 / 0 end
   return sign * (1024 + m) * 2 ^ (e - 25)
end

local half_table -- the 65536 halves as floats, made on first use
local function halves()
   if half_table == nil then
      half_table = ffi.new("float[65536]")
      for h = 0, 65535 do half_table[h] = half(h) end
   end
   return half_table
end

-- Tensor `name` of an open file as a new fp32 host array (float*) of its numel. A renamed view
-- of a file (foreign.view) maps its names to the file's in f.stored.
function weights.read(f, name)
   -- an invariant: the callers read the names weights.check found in the file
   local view = assert(safetensors.find(f.st, f.stored and f.stored[name] or name), name)
   local n = numel(f.shapes[name])
   local out = ffi.new("float[?]", math.max(n, 1))
   local dtype = f.dtypes[name]
   if dtype == "F32" then
      ffi.copy(out, view.data, 4 * n) -- a copy: the file's data need not be 4-byte aligned
      return out
   end
   local src = ffi.new("uint16_t[?]", math.max(n, 1))
   ffi.copy(src, view.data, 2 * n)
   if dtype == "BF16" then
      local bits = ffi.cast("uint32_t *", out)
      for i = 0, n - 1 do bits[i] = bit.lshift(src[i], 16) end
   else
      -- an invariant: weights.check refused any other dtype before a read
      assert(dtype == "F16", "weights.read: dtype " .. dtype)
      local t = halves()
      for i = 0, n - 1 do out[i] = t[src[i]] end
   end
   return out
end

-- The { name, shape } of each of a model's parameter specs: weights.check's `expected`.
function weights.names_and_shapes(specs)
   local out = {}
   for _, spec in ipairs(specs) do out[#out + 1] = { name = spec.name, shape = spec.shape } end
   return out
end

-- Checks an open file against `expected` (list of { name, shape }): the first problem as one
-- line starting with `where`: a shape that differs, a missing tensor, one the model does not
-- have, or a dtype other than F32, BF16, F16. names: what the expected names are, for the
-- missing and extra lines ("lwopt's names").
function weights.check(f, expected, where, names)
   local count = ("the file has %d tensors, the model %d%s"):format(#f.order, #expected,
      names and (" by " .. names) or "")
   local wanted = {}
   for _, e in ipairs(expected) do wanted[e.name] = e end
   -- a shape first: a model of another size differs there before it differs in its names
   for _, e in ipairs(expected) do
      local have = f.shapes[e.name]
      if have then
         local same = #have == #e.shape
         for d = 1, #have do same = same and have[d] == e.shape[d] end
         if not same then
            errors.fail(where, "'%s' has shape %s in the file but %s in the model", e.name,
               shape_text(have), shape_text(e.shape))
         end
      end
   end
   local missing = {}
   for _, e in ipairs(expected) do
      if f.shapes[e.name] == nil then missing[#missing + 1] = e.name end
   end
   if #missing > 0 then
      errors.fail(where, "no tensor '%s' (%s%s)", missing[1], #missing > 1
         and ("%d more missing; "):format(#missing - 1) or "", count)
   end
   local extra = {}
   for _, name in ipairs(f.order) do
      if wanted[name] == nil then extra[#extra + 1] = name end
   end
   if #extra > 0 then
      errors.fail(where, "tensor '%s' is not in the model (%s%s)", extra[1], #extra > 1
         and ("%d more are not; "):format(#extra - 1) or "", count)
   end
   for _, e in ipairs(expected) do
      if not weights.DTYPES[f.dtypes[e.name]] then
         errors.fail(where, "'%s' is %s; F32, BF16 and F16 tensors are read", e.name,
            f.dtypes[e.name])
      end
   end
end

-- The distinct dtypes of an open file's tensors, "F32" or "BF16 + F32", for messages.
function weights.dtype_text(f)
   local seen, list = {}, {}
   for _, name in ipairs(f.order) do
      local d = f.dtypes[name]
      if not seen[d] then
         seen[d] = true
         list[#list + 1] = d
      end
   end
   table.sort(list)
   return table.concat(list, " + ")
end

-- A new fp32 array [cols, rows] holding src [rows, cols] (row-major) transposed: between
-- nn.Linear's [out, in] and Conv1D's [in, out] (lwopt export, --init-from).
function weights.transpose(src, rows, cols)
   local out = ffi.new("float[?]", math.max(rows * cols, 1))
   for r = 0, rows - 1 do
      local row = src + r * cols
      for c = 0, cols - 1 do out[c * rows + r] = row[c] end
   end
   return out
end

return weights
