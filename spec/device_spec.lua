-- device_spec.lua: lw.has_cuda, lw.device_info and lw.device_line (lua/lwopt/init.lua), and
-- `lwopt device`, on a machine without a GPU; the GPU side is tests/test_cuda.c and tests/gpu/
-- (ctest -L gpu), so the specs that need a GPU are pending here and run there.
local lw = require("lwopt")
local cli = require("lwopt.app.cli")
local helpers = require("helpers")

local function run(argv)
   local out, err = helpers.sink(), helpers.sink()
   local status = cli.main(argv, out, err)
   return status, out.text(), err.text()
end

-- Why "cuda" cannot be had here: the library missing, or (built) no usable driver or no GPU.
local NO_CUDA = "CUDA is not available: "

describe("lw.device_info", function()
   it("describes the CPU with the machine's memory and cores", function()
      local d = lw.device_info()
      assert.same(d, lw.device_info("cpu"))
      assert.equal("cpu", d.device)
      assert.equal("cpu", d.name)
      assert.is_true(d.total_bytes >= 64 * 2 ^ 20)
      assert.is_true(d.free_bytes > 0 and d.free_bytes <= d.total_bytes)
      assert.equal(0, d.capability)
      assert.is_true(d.processors >= 1)
      assert.equal("", d.software)
      assert.equal("", d.id)
      assert.matches("^cpu %(%d+ cores?, %d+%.%d GiB%)$", lw.device_line("cpu"))
   end)

   it("names an unknown device", function()
      local d, why = lw.device_info("tpu")
      assert.is_nil(d)
      assert.equal("device: unknown device 'tpu' (cpu, cuda or cuda:N)", why)
      assert.has_error(function() lw.device_info(3) end, "lw.device_info: name must be a string")
   end)

   if lw.has_cuda() then
      pending("without a GPU: this machine has one (ctest -L gpu checks it)")
   else
      it("says exactly why CUDA is unavailable, and has_cuda agrees", function()
         assert.is_false(lw.has_cuda())
         local d, why = lw.device_info("cuda")
         assert.is_nil(d)
         assert.matches(NO_CUDA, why, 1, true)
         -- the library missing names where it looked; a built one says what the driver lacks
         local missing = why:find("liblwopt_cuda.so could not be loaded", 1, true)
         local driver = why:find("no usable NVIDIA driver", 1, true)
            or why:find("the driver sees no GPU", 1, true)
         assert.is_truthy(missing or driver, why)
         local line, again = lw.device_line("cuda:0")
         assert.is_nil(line)
         assert.matches(NO_CUDA, again, 1, true)
      end)
   end
end)

describe("lwopt device", function()
   it("prints the CPU's name, memory, cores and software", function()
      local status, out = run({ "device", "cpu" })
      assert.equal(0, status)
      assert.matches("^device      cpu\nname        cpu\nmemory      %d+%.%d GiB total, "
         .. "%d+%.%d GiB free\ncapability  %-\nprocessors  %d+ cores\nsoftware    %-\n"
         .. "id          %-\n$", out)
   end)

   it("fails on an unknown device or a second name", function()
      local status, _, err = run({ "device", "tpu" })
      assert.equal(1, status)
      assert.equal("lwopt device: tpu: device: unknown device 'tpu' (cpu, cuda or cuda:N)\n", err)
      status, _, err = run({ "device", "cpu", "cuda" })
      assert.equal(2, status)
      assert.matches("device takes at most one NAME", err, 1, true)
   end)

   if lw.has_cuda() then
      pending("without a GPU: this machine has one")
   else
      it("says why there is no GPU: status 1 when asked for it, 0 in the overview", function()
         local status, out, err = run({ "device", "cuda" })
         assert.equal(1, status)
         assert.equal("", out)
         assert.matches("^lwopt device: cuda: .*" .. NO_CUDA:gsub("%p", "%%%0"), err)
         status, out = run({ "device" })
         assert.equal(0, status)
         assert.matches("^device      cpu\n.*\n\ndevice      cuda\nunavailable .*" .. NO_CUDA, out)
      end)
   end
end)
