-- nn/qkv_heads.lua: QKVHeads, the base of the parameter-free modules that work in place on the
-- Q and K heads of a fused qkv activation (nn.Rotary, nn.QKNorm): its layout, rows of n_head Q
-- heads, then n_kv_head K heads, then n_kv_head V heads, head_dim each (the layout grouped-query
-- attention reads; n_kv_head = n_head is the plain one). Each module checks its own options and
-- says its own misuse (errors.misuse names the line that called the module).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")

local lib = C.lib

local QKVHeads = base.class(base.Module)
QKVHeads.shape_args = { "b", "t" }
-- qkv's dtype (lw_dtype), and its gradient's: bf16 where the model keeps qkv so
QKVHeads.qkv_dtype = lib.LW_DTYPE_F32

-- Whether v is a whole number >= 1.
function QKVHeads.whole(v) return type(v) == "number" and v >= 1 and v % 1 == 0 end

-- self initialised with opts' prefix (default "") and its head_dim, n_head and n_kv_head
-- (default n_head), not yet checked; returns self.
function QKVHeads:init_heads(opts)
   self:init(opts.prefix or "")
   self.head_dim, self.n_head = opts.head_dim, opts.n_head
   self.n_kv_head = opts.n_kv_head or opts.n_head
   return self
end

-- Elements in a row of qkv: Q, K and V heads.
function QKVHeads:row_width() return (self.n_head + 2 * self.n_kv_head) * self.head_dim end

-- The heads the module works on in a row: Q and K.
function QKVHeads:qk_heads() return self.n_head + self.n_kv_head end

return QKVHeads
