-- require_gpu.lua: the GPU scripts' common start. Returns the device a script runs on (its
-- first argument, default `default` or "cuda"), or ends the script: exit 77 (skipped) when CUDA itself is
-- absent, 1 when a GPU is there but fails to open (that is a failure, not a skip). "cpu" runs
-- the script's checks CPU against CPU, to check the script on a machine without a GPU.
-- Load with dofile("tests/gpu/require_gpu.lua")(script_name [, default]).
local lw = require("lwopt")

return function(script, default)
   local device = arg and arg[1] or default or "cuda"
   if device ~= "cpu" and not lw.has_cuda() then
      local _, why = lw.device_info(device)
      if why and why:find("CUDA is not available", 1, true) then
         print(script .. ": skipped: " .. why)
         os.exit(77)
      end
      io.stderr:write(script, ": ", tostring(why), "\n")
      os.exit(1)
   end
   print(script .. ": on " .. (lw.device_line(device) or device))
   return device
end
