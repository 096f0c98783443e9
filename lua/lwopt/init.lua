-- lwopt: the Lua front end. require("lwopt") gives the modules (models, arch, route, layout,
-- stepmodel, comm, ep, tp, tensor, ddp, optim, nn, data, data_order, tokens, train, checkpoint,
-- json) and the library's version and features; see docs/architecture.md and docs/lua.md.
-- lw.stepmodel (the planner, lua/lwopt/planner/) is loaded on first use: training never needs it.
local C = require("lwopt.C")
local ffi = require("ffi")
local errors = require("lwopt.errors")

local lw = {
   models = require("lwopt.models"),
   arch = require("lwopt.arch"),
   route = require("lwopt.route"),
   layout = require("lwopt.layout"),
   comm = require("lwopt.comm"),
   ep = require("lwopt.ep"),
   tp = require("lwopt.tp"),
   tensor = require("lwopt.tensor"),
   ddp = require("lwopt.ddp"),
   optim = require("lwopt.optim"),
   nn = require("lwopt.nn"),
   data = require("lwopt.data"),
   data_order = require("lwopt.data_order"),
   tokens = require("lwopt.tokens"),
   train = require("lwopt.train"),
   schedule = require("lwopt.schedule"),
   checkpoint = require("lwopt.checkpoint"),
   json = require("lwopt.json"),
   version = ffi.string(C.lib.lw_version()),
   library = C.path,
}

-- Modules loaded on first access rather than with lwopt: the planner.
local LAZY = { stepmodel = "lwopt.planner" }
setmetatable(lw, { __index = function(t, key)
   local name = LAZY[key]
   if name == nil then return nil end
   local module = require(name)
   rawset(t, key, module)
   return module
end })

-- Whether the CUDA library loads and sees a GPU (lw.device_info("cuda") says why not).
function lw.has_cuda()
   return C.lib.lw_has_cuda()
end

-- What device `name` ("cpu", "cuda", "cuda:N"; default "cpu"; "cuda" under a launcher is this
-- rank's GPU, as lw.ddp.device) is: { device = "cuda:0", name =
-- "NVIDIA H100 80GB HBM3", total_bytes, free_bytes, capability (90 for sm_90; 0 for the CPU),
-- processors (SMs; the CPU's cores), software ("CUDA 13.0 (driver ...), cuBLAS ..., NCCL ...";
-- "" for the CPU), id (the GPU's UUID, "GPU-6f2c..."; "" for the CPU) }; nil and the reason (lw_device_get's message: the library missing, no
-- usable driver, no GPU) when the device cannot be had.
function lw.device_info(name)
   name = name or "cpu"
   if type(name) ~= "string" then errors.misuse("lw.device_info", "name must be a string") end
   -- the device lw.ddp.new would train on ("cuda" under a launcher: this rank's GPU)
   local ok, device = pcall(lw.ddp.device, name)
   if not ok then return nil, (tostring(device):gsub("^lw%.ddp%.[%w_]+: ", "")) end
   local info = ffi.new("lw_device_info")
   if C.lib.lw_device_get_info(device, info) ~= 0 then return nil, C.last_error() end
   return { device = ffi.string(C.lib.lw_device_name(device)), name = ffi.string(info.name),
      total_bytes = tonumber(info.total_bytes), free_bytes = tonumber(info.free_bytes),
      capability = tonumber(info.capability), processors = tonumber(info.processors),
      software = ffi.string(info.software), id = ffi.string(info.id) }
end

-- One line for logs: "cpu (8 cores, 31.3 GiB)" or "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 132
-- SMs, 79.1 GiB; CUDA 13.0 ...)"; nil and the reason as lw.device_info.
function lw.device_line(name)
   local d, why = lw.device_info(name)
   if d == nil then return nil, why end
   local gib = d.total_bytes / 2 ^ 30
   if d.capability == 0 then
      return ("%s (%d core%s, %.1f GiB)"):format(d.device, d.processors,
         d.processors == 1 and "" or "s", gib)
   end
   return ("%s (%s, sm_%d, %d SMs, %.1f GiB; %s)"):format(d.device, d.name, d.capability,
      d.processors, gib, d.software)
end

-- Seconds on a monotonic clock.
function lw.now()
   return C.lib.lw_now()
end

return lw
