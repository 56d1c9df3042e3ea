/* placeholder while test_store_client is being written this session */
int main(void)
{
	return 77;
}
