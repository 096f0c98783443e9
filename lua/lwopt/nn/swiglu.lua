-- nn/swiglu.lua: SwiGLU, y = silu(a) * b over fused input rows [a | b] (LLaMA's gate and up
-- projections as one linear layer of 2 width outputs, gate first), over lw_swiglu_forward /
-- _backward; no parameters (the rest is nn/activation.lua's).
local C = require("lwopt.C")
local Activation = require("lwopt.nn.activation")

local lib = C.lib

-- SwiGLU(width): rows of 2 width elements in (the gate's width, then the up projection's), of
-- width out; backward accumulates the fused gradient [n, 2 width].
local SwiGLU = Activation.derive(lib.lw_swiglu_forward, lib.lw_swiglu_backward, 2)

-- its kernels take the rows and the fused width
function SwiGLU:sizes(n) return n, self.in_width end

return SwiGLU
