-- options_spec.lua: the C option structs' fields as lwopt.options reads them from the generated
-- cdef: every field the FFI knows, in order, each with the kind its C type gives, and the
-- options lw.optim.new and lw.ddp.new take from them.
local ffi = require("ffi")
local lw = require("lwopt")
local C = require("lwopt.C")
local options = require("lwopt.options")

local STRUCTS = { "lw_optimizer_options", "lw_muon_options", "lw_adamw_options",
   "lw_runtime_options", "lw_layout_options", "lw_buffers_options" }

describe("lwopt.options", function()
   it("reads each option struct's fields in order, size left out, all known to the FFI", function()
      for _, struct in ipairs(STRUCTS) do
         local fields = options.fields(struct)
         assert.is_true(#fields > 0, struct)
         local last = ffi.offsetof(struct, "size")
         for _, f in ipairs(fields) do
            local at = ffi.offsetof(struct, f.name)
            assert.is_true(at > last, struct .. "." .. f.name .. " out of order")
            last = at
         end
      end
   end)

   it("gives each field the kind its C type says", function()
      local kinds = {}
      for _, f in ipairs(options.fields("lw_muon_options")) do kinds[f.name] = f end
      assert.equal("number", kinds.momentum.kind)
      assert.equal("boolean", kinds.nesterov.kind)
      assert.equal("integer", kinds.ns_steps.kind)
      assert.equal("pointer", kinds.custom.kind)
      assert.same({ "enum", "ns_precision" }, { kinds.precision.kind, kinds.precision.enum })
      assert.same(C.names("muon_tp_mode"), C.names(kinds.tp_mode.enum))
      assert.equal("struct", options.field("lw_optimizer_options", "muon").kind)
      assert.equal("pointer", options.field("lw_optimizer_options", "tp_comm").kind)
      assert.equal("array", options.field("lw_param_spec", "shape").kind)
      assert.is_nil(options.field("lw_muon_options", "size"))
   end)

   it("makes every plain field of Muon's and AdamW's structs an option of lw.optim.new", function()
      local d = lw.ddp.new({ { name = "w", shape = { 8, 4 }, role = "matrix" } }, lw.comm.self())
      local defaults = C.lib.lw_optimizer_defaults()
      for _, part in ipairs({ "muon", "adamw" }) do
         local struct = part == "muon" and "lw_muon_options" or "lw_adamw_options"
         for _, f in ipairs(options.fields(struct)) do
            local value = defaults[part][f.name]
            if f.kind == "enum" then value = C.name(f.enum, value) end
            if f.kind == "number" or f.kind == "integer" then value = tonumber(value) end
            -- coefficients and the custom list stand for coeffs, custom, n_custom, custom_repeat
            if f.kind ~= "pointer" and f.name ~= "coeffs" and f.name ~= "n_custom"
               and f.name ~= "custom_repeat" then
               local ok, err = pcall(lw.optim.new, d, { [part] = { [f.name] = value } })
               assert.is_true(ok, tostring(err))
               if f.kind == "number" or f.kind == "integer" or f.kind == "boolean" then
                  ok, err = pcall(lw.optim.new, d, { [part] = { [f.name] = "x" } })
                  assert.matches("^lw%.optim%.new: " .. part .. "%." .. f.name .. " must be ", err)
               end
            end
         end
      end
   end)
end)
