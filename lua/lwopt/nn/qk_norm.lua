-- nn/qk_norm.lua: QKNorm, the parameter-free RMS norm of each Q and K head of a fused qkv
-- activation, in place (nanochat's QK norm, after the rotary embedding), over
-- lw_head_rmsnorm_forward / _backward; no parameters. In place as nn.Rotary is (nn/rotary.lua):
-- forward normalises its input and returns it, keeping each head's 1/rms; backward takes the
-- forward's output (the same buffer, still holding it) and turns grad_output into the input
-- gradient in place. The qkv layout is nn/qkv_heads.lua's.
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local QKVHeads = require("lwopt.nn.qkv_heads")
local errors = require("lwopt.errors")

local lib = C.lib
local check = base.check
local whole = QKVHeads.whole

local QKNorm = base.class(QKVHeads)

-- QKNorm{ head_dim =, n_head =, n_kv_head = n_head, eps = 2^-23 }: eps torch's rms_norm takes
-- for fp32 when given none (nanochat's).
function QKNorm.new(opts)
   local fail = errors.failer("nn.QKNorm")
   if type(opts) ~= "table" then errors.misuse("nn.QKNorm", "takes a table of options") end
   local self = setmetatable({}, QKNorm):init_heads(opts)
   self.eps = opts.eps or 2 ^ -23
   if not whole(self.head_dim) or not whole(self.n_head) or not whole(self.n_kv_head) then
      fail("head_dim, n_head and n_kv_head must be whole numbers >= 1, got %s, %s and %s",
         tostring(self.head_dim), tostring(self.n_head), tostring(self.n_kv_head))
   end
   if type(self.eps) ~= "number" or not (self.eps >= 0) or self.eps == math.huge then
      fail("eps must be a finite number >= 0, got %s", tostring(self.eps))
   end
   return self
end

-- qkv: [b*t, row width] of self.qkv_dtype, its Q and K heads normalised in place; returns qkv.
function QKNorm:forward(qkv, b, t)
   self.rstd = self:buffer("rstd", b * t * self:qk_heads())
   check(lib.lw_head_rmsnorm_forward(self.stream, qkv, self.qkv_dtype, self.rstd, b * t,
      self:row_width(), 0, self:qk_heads(), self.head_dim, self.eps))
   return qkv
end

-- y: the forward's output (its qkv, unchanged since); dqkv turned into the input gradient.
function QKNorm:backward(y, dqkv, dx, b, t)
   if dx ~= nil and dx ~= dqkv then
      errors.misuse("nn.QKNorm", "works in place: grad_input must be nil or grad_output")
   end
   local dtype = self.qkv_dtype
   check(lib.lw_head_rmsnorm_backward(self.stream, dqkv, dtype, y, dtype, self.rstd, b * t,
      self:row_width(), 0, self:qk_heads(), self.head_dim))
   return dqkv
end

return QKNorm
