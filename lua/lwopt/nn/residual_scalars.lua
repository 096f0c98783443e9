-- nn/residual_scalars.lua: ResidualScalars, nanochat's per-layer residual scalars (after
-- modded-nanogpt): before block i the residual stream becomes resid_lambdas[i] x +
-- x0_lambdas[i] x0, x0 the embedding's output, over lw_residual_mix_forward / _backward. Its two
-- parameters {n_layer} (role "scalar") are read by every layer: the owner holds them over the
-- whole trunk (hold / let_go) rather than acquiring them once per layer, and their gradients are
-- complete after the first layer's backward, the last (the module contract is in nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")

local lib = C.lib
local check = base.check

local ResidualScalars = base.class(base.Module)

-- ResidualScalars(n_layer, c): parameters resid_lambdas and x0_lambdas {n_layer}, for rows of
-- c channels.
function ResidualScalars.new(n_layer, c)
   local self = setmetatable({}, ResidualScalars):init("")
   self.n_layer, self.c = n_layer, c
   self:declare("resid_lambdas", { n_layer }, "scalar")
   self:declare("x0_lambdas", { n_layer }, "scalar")
   return self
end

-- Holds the parameters (and in backward their gradients) for a pass over the trunk. Forward
-- reads them in definition order (before the blocks); backward reads them ahead of that order
-- (the last layer first), so as a reuse, and reports them after let_go.
function ResidualScalars:hold(pass)
   self.pass = pass
   self:acquire(pass, pass == "backward")
end

function ResidualScalars:let_go()
   self:release()
   if self.pass == "backward" then
      for _, name in ipairs(self.ready_order) do self.hooks.ready(name) end
   end
   self.pass = nil
end

-- Layer i's (1-based) mix of x and x0 (float* [n, c]) into its own buffer, kept for the layer's
-- backward until the next forward.
function ResidualScalars:forward(i, x, x0, n)
   local y = self:buffer("x" .. i, n * self.c)
   check(lib.lw_residual_mix_forward(self.stream, y, x, x0, self.w["resid_lambdas"] + (i - 1),
      self.w["x0_lambdas"] + (i - 1), n * self.c))
   return y
end

-- Layer i's backward from dy (the mix's output gradient): dx += resid_lambdas[i] dy, dx0 +=
-- x0_lambdas[i] dy, and the two scalars' gradients; x and x0 as the forward took them.
function ResidualScalars:backward(i, x, x0, dy, dx, dx0, n)
   local k = i - 1
   check(lib.lw_residual_mix_backward(self.stream, dx, dx0, self.g["resid_lambdas"] + k,
      self.g["x0_lambdas"] + k, dy, x, x0, self.w["resid_lambdas"] + k, self.w["x0_lambdas"] + k,
      n * self.c))
end

return ResidualScalars
