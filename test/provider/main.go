// Command terraform-provider-testing is a small Terraform provider that the
// tests build and install through a filesystem mirror, since no registry is
// reachable: a real plugin, started by terraform or tofu over gRPC, whose
// resource keeps a file on disk, so that drift can be made by changing the
// file.
//
// Its source address is registry.terraform.io/terrarun/testing:
//
//	terraform {
//	  required_providers {
//	    testing = { source = "registry.terraform.io/terrarun/testing" }
//	  }
//	}
//
//	resource "testing_file" "x" {
//	  path    = "/some/dir/x.txt"
//	  content = "hello"
//	}
package main

import (
	"context"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
)

// version is the provider's version, as the mirror lays it out.
const version = "0.1.0"

func main() {
	err := providerserver.Serve(context.Background(), newProvider, providerserver.ServeOpts{
		Address: "registry.terraform.io/terrarun/testing",
	})
	if err != nil {
		log.Fatal(err)
	}
}
