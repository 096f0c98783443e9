-- nn/gelu.lua: GELU (tanh approximation), element-wise over lw_gelu_forward / _backward; no
-- parameters (the rest is nn/activation.lua's).
local C = require("lwopt.C")
local Activation = require("lwopt.nn.activation")

local lib = C.lib

-- GELU(width): rows of `width` elements in and out.
local GELU = Activation.derive(lib.lw_gelu_forward, lib.lw_gelu_backward)

return GELU
