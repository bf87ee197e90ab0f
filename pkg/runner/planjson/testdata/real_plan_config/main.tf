variable "password" {
  type      = string
  sensitive = true
  default   = "default-pw-123"
}

variable "tags" {
  type = map(string)
}

variable "plain" {
  type = string
}

module "inner" {
  source = "./inner"
  secret = var.password
  note   = "literal-note"
}

resource "terraform_data" "with_secret" {
  input = {
    name     = "db"
    password = var.password
    tags     = var.tags
    list     = ["a", var.password, "c"]
  }
}

resource "terraform_data" "plain" {
  input = var.plain
}

output "password" {
  value     = var.password
  sensitive = true
}

output "name" {
  value = terraform_data.plain.input
}
