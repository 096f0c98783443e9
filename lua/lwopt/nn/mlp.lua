-- nn/mlp.lua: MLP, fc (c -> 4c), GELU, proj (4c -> c) (the module contract is in
-- nn/module.lua).
local base = require("lwopt.nn.module")
local Linear = require("lwopt.nn.linear")
local GELU = require("lwopt.nn.gelu")

local zero = base.zero

local MLP = base.class(base.Module)
MLP.shape_args = { "n" }

function MLP.new(prefix, c, bias)
   local self = setmetatable({}, MLP):init(prefix)
   self.c = c
   self.fc = self:add(Linear.new(prefix .. "fc.", c, 4 * c, bias))
   self.gelu = GELU.new(4 * c)
   self.proj = self:add(Linear.new(prefix .. "proj.", 4 * c, c, bias))
   return self
end

-- x: float* [n, c] -> float* [n, c]
function MLP:forward(x, n)
   self.h = self.fc:forward(x, n)
   self.a = self.gelu:forward(self.h, n)
   return self.proj:forward(self.a, n)
end

function MLP:backward(x, dout, dx, n)
   local w = 4 * self.c
   local da, dh = self:buffer("da", n * w), self:buffer("dh", n * w)
   zero(da, n * w, self.stream)
   self.proj:backward(self.a, dout, da, n)
   zero(dh, n * w, self.stream)
   self.gelu:backward(self.h, da, dh, n)
   self.fc:backward(x, dh, dx, n)
end

return MLP
