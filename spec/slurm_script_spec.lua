-- slurm_script_spec.lua: scripts/slurm/train.sbatch as a file: bash parses it, shellcheck finds
-- nothing (pending where shellcheck is not installed), sbatch would read all its #SBATCH lines
-- (they come before the first command), and docs/cluster.md shows it as it is. What it does
-- under a batch shell is tests/slurm/requeue.sh's.
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local SCRIPT = root .. "/scripts/slurm/train.sbatch"

describe("scripts/slurm/train.sbatch", function()
   it("parses as bash and is executable", function()
      local out, status = helpers.sh("bash -n " .. SCRIPT)
      assert.equal(0, status, out)
      assert.equal(0, select(2, helpers.sh("test -x " .. SCRIPT)))
   end)

   if select(2, helpers.sh("command -v shellcheck")) == 0 then
      it("passes shellcheck", function()
         local out, status = helpers.sh("shellcheck " .. SCRIPT)
         assert.equal(0, status, out)
      end)
   else
      pending("passes shellcheck (shellcheck is not installed)")
   end

   it("gives sbatch every #SBATCH line before its first command", function()
      local directives, after = {}, {}
      local command_seen = false
      for line in io.lines(SCRIPT) do
         if line:match("^#SBATCH") then
            local list = command_seen and after or directives
            list[#list + 1] = line
         elseif not line:match("^%s*#") and line:match("%S") then
            command_seen = true
         end
      end
      assert.same({}, after)
      for _, want in ipairs({ "#SBATCH --signal=B:USR1@180", "#SBATCH --requeue" }) do
         assert.is_truthy(table.concat(directives, "\n"):find(want, 1, true), want)
      end
   end)

   it("is shown whole in docs/cluster.md", function()
      local doc = helpers.slurp(root .. "/docs/cluster.md")
      local script = helpers.slurp(SCRIPT)
      local shown = doc:match("\n```bash\n(#!/bin/bash\n# train%.sbatch:.-\n)```\n")
      assert.is_string(shown, "docs/cluster.md shows no ```bash block starting as the script")
      assert.equal(script, shown)
   end)
end)
