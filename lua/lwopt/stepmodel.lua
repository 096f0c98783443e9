-- stepmodel.lua: require("lwopt.stepmodel") as before the planner had a folder of its own: the
-- same table as lw.stepmodel (lua/lwopt/planner/).
return require("lwopt.planner")
