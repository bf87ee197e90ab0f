# The configuration that artifacts/examples/oci-source.yaml runs, published
# as an OCI artifact (see that file).
resource "terraform_data" "release" {
  input = "published as an OCI artifact"
}

output "release" {
  value = terraform_data.release.output
}
