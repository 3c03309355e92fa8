"""One construct per capability; stacks only compose them."""
