/* placeholder: being written this session */
typedef int mc__placeholder_client;
