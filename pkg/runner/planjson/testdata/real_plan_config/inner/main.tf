variable "secret" {
  type      = string
  sensitive = true
}
variable "note" {
  type = string
}
resource "terraform_data" "inner" {
  input = [var.note, var.secret]
}
