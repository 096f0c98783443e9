-- tensor.lua: a float32 view with a shape over memory lwopt owns (a parameter or gradient in a
-- flat buffer). It never allocates the data; it keeps its owner alive while it exists.
local ffi = require("ffi")
local errors = require("lwopt.errors")

local Tensor = {}
Tensor.__index = Tensor

local tensor = {}

-- A view of numel floats at ptr (float*), shaped `shape`, keeping `owner` alive.
function tensor.view(ptr, shape, owner)
   local numel = 1
   for _, d in ipairs(shape) do numel = numel * d end
   return setmetatable({ data = ffi.cast("float *", ptr), shape = shape, numel = numel,
                         _owner = owner }, Tensor)
end

function tensor.is_tensor(x) return getmetatable(x) == Tensor end

-- Element i, 1-based over the flattened tensor.
function Tensor:at(i)
   if not (i >= 1 and i <= self.numel) then errors.misuse("tensor:at", "index out of range") end
   return self.data[i - 1]
end

function Tensor:set(i, v)
   if not (i >= 1 and i <= self.numel) then errors.misuse("tensor:set", "index out of range") end
   self.data[i - 1] = v
   return self
end

function Tensor:fill(v)
   for i = 0, self.numel - 1 do self.data[i] = v end
   return self
end

-- Copies from a Lua list, another tensor, or a function f(i) -> value (1-based i).
function Tensor:copy(src)
   if type(src) == "function" then
      for i = 0, self.numel - 1 do self.data[i] = src(i + 1) end
   elseif tensor.is_tensor(src) then
      if src.numel ~= self.numel then errors.misuse("tensor:copy", "sizes differ") end
      ffi.copy(self.data, src.data, 4 * self.numel)
   else
      if #src ~= self.numel then errors.misuse("tensor:copy", "sizes differ") end
      for i = 1, self.numel do self.data[i - 1] = src[i] end
   end
   return self
end

function Tensor:totable()
   local t = {}
   for i = 0, self.numel - 1 do t[i + 1] = self.data[i] end
   return t
end

function Tensor:sum()
   local s = 0
   for i = 0, self.numel - 1 do s = s + self.data[i] end
   return s
end

function Tensor:norm()
   local s = 0
   for i = 0, self.numel - 1 do s = s + self.data[i] * self.data[i] end
   return math.sqrt(s)
end

function Tensor:max_abs_diff(other)
   if other.numel ~= self.numel then errors.misuse("tensor:max_abs_diff", "sizes differ") end
   local m = 0
   for i = 0, self.numel - 1 do m = math.max(m, math.abs(self.data[i] - other.data[i])) end
   return m
end

Tensor.__tostring = function(self)
   local dims, shown = {}, {}
   for i, d in ipairs(self.shape) do dims[i] = tostring(d) end
   for i = 0, math.min(self.numel, 6) - 1 do shown[#shown + 1] = string.format("%.4g", self.data[i]) end
   return string.format("tensor{%s} [%s%s]", table.concat(dims, ", "), table.concat(shown, ", "),
      self.numel > 6 and ", ..." or "")
end

return tensor
