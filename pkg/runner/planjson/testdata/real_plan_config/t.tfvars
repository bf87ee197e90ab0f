password = "hunter2-very-secret"
tags = { env = "prod", owner = "team-hunter2-very-secret" }
plain = "visible"
