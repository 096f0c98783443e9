-- C_spec.lua: the FFI binding: generated declarations, errors raised with the C message, a
-- clear message when the library cannot be found, and the library kept loaded for its cdata.
local C = require("lwopt.C")
local ffi = require("ffi")
local helpers = require("helpers")

describe("lwopt.C", function()
   it("declares the API from src/lw.h", function()
      assert.equal("cdata", type(C.lib.lw_layout_defaults()))
      assert.equal(1, C.lib.lw_layout_defaults().dp)
      assert.equal(-1, ffi.C and tonumber(ffi.new("lw_status", "LW_ERR_INVALID")))
   end)

   it("turns a failed status into an error carrying lw_last_error", function()
      local out = ffi.new("lw_layout*[1]")
      local status = C.lib.lw_layout_new(nil, -1, nil, out)
      assert.has_error(function() C.check(status, "here") end,
         "here: layout: negative parameter count -1")
      assert.has_error(function() C.check(status, "here", " (what to change)") end,
         "here: layout: negative parameter count -1 (what to change)")
      assert.has_no_error(function() C.check(0) end)
   end)

   it("reads enum names from the library, never keeping the numbers", function()
      assert.same({ "cost", "lpt", "size_matching", "distopt", "default", "legacy", "rows",
         "packed" },
         C.names("algorithm"))
      assert.same({ "layerwise", "legacy", "replicated" }, C.names("mode"))
      assert.same({ "f32", "bf16", "f16", "f64", "i64" }, C.names("dtype"))
      local names = C.names("shard")
      names[1] = "changed" -- a copy: the next caller still gets the library's names
      assert.same({ "aligned", "rows" }, C.names("shard"))
      assert.equal("bf16", C.name("dtype", C.lib.LW_DTYPE_BF16))
      assert.is_nil(C.name("algorithm", C.lib.LW_ALGORITHM_AUTO))
      assert.equal(C.lib.LW_MUON_SCALE_MOONLIGHT, C.value("muon_scale", "moonlight"))
      assert.equal(C.lib.LW_PATH_DIR, C.value("path_kind", "dir"))
      local v, why = C.value("weight_decay", "l3")
      assert.is_nil(v)
      assert.equal("unknown weight decay mode 'l3' (one of decoupled, independent, l2, scaled)",
         why)
      assert.equal("unknown reduce op '7' (one of sum, max, min)", select(2, C.value("reduce_op", 7)))
   end)

   -- OpenBLAS's idle threads otherwise spin for 2^28 cycles after each call, taking a core from
   -- the CPU kernels' pool; OpenBLAS reads the variable once, when the library loads it.
   it("has OpenBLAS's idle threads sleep after 2^16 cycles unless the user says otherwise", function()
      local script = "'package.path=\"lua/?.lua;lua/?/init.lua;build/lua/?.lua;\"..package.path "
         .. "require(\"lwopt\") local ffi = require(\"ffi\") "
         .. "ffi.cdef(\"int openblas_thread_timeout(void);\") "
         .. "io.write(ffi.load(\"libopenblas.so.0\").openblas_thread_timeout())'"
      local out, status = helpers.sh("env -u OPENBLAS_THREAD_TIMEOUT luajit -e " .. script)
      assert.equal(0, status, out)
      assert.equal("16", out)
      out, status = helpers.sh("OPENBLAS_THREAD_TIMEOUT=20 luajit -e " .. script)
      assert.equal(0, status, out)
      assert.equal("20", out)
   end)

   it("says how to fix a library that cannot be loaded", function()
      local out, status = helpers.sh("LWOPT_LIB=/nonexistent/liblwopt.so luajit -e "
         .. "'package.path=\"lua/?.lua;lua/?/init.lua;build/lua/?.lua;\"..package.path "
         .. "require(\"lwopt\")'")
      assert.not_equal(0, status)
      assert.matches("cannot load the library '/nonexistent/liblwopt.so'", out, 1, true)
      assert.matches("point LWOPT_LIB at liblwopt.so", out, 1, true)
   end)

   it("keeps the library loaded when its modules are dropped, for the finalizers of its cdata",
      function()
      -- parsed JSON documents are freed by lw_json_free when collected; with every lwopt module
      -- dropped (as a host reloading modules does) one collection takes the library's namespace
      -- and the documents together, and an unloaded library crashed the finalizers
      local script = helpers.tempfile([[
package.path = "lua/?.lua;lua/?/init.lua;build/lua/?.lua;" .. package.path
collectgarbage("stop")
do
   local json = require("lwopt.json")
   for i = 1, 200 do json.decode('{"a": [1, 2, 3], "b": "x"}') end
end
for name in pairs(package.loaded) do
   if name:match("^lwopt") then package.loaded[name] = nil end
end
collectgarbage("restart")
collectgarbage()
collectgarbage()
print("survived")
]])
      local out, status = helpers.sh("luajit " .. script)
      os.remove(script)
      assert.equal(0, status, out)
      assert.equal("survived\n", out)
   end)
end)
