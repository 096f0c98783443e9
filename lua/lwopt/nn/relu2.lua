-- nn/relu2.lua: ReLU^2, y = max(x, 0)^2 (the squared ReLU nanochat's MLP uses), element-wise
-- over lw_relu2_forward / _backward; no parameters (the rest is nn/activation.lua's).
local C = require("lwopt.C")
local Activation = require("lwopt.nn.activation")

local lib = C.lib

-- ReLU2(width): rows of `width` elements in and out.
local ReLU2 = Activation.derive(lib.lw_relu2_forward, lib.lw_relu2_backward)

return ReLU2
